"""`dflash-supervisor demo`: a whole job on simulated SGLang servers (command.py), its config
(config.py), its built-in prompt set (prompts.py) and its progress line (progress.py)."""

from supervisor.demo.command import main
# Kept importable from here for code written before the finder moved to supervisor/free_ports.py.
from supervisor.free_ports import free_base_port

__all__ = ["free_base_port", "main"]
