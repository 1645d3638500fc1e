"""`dflash-supervisor demo`: a whole job on simulated SGLang servers (command.py), its config
(config.py), its built-in prompt set (prompts.py) and its progress line (progress.py)."""

from supervisor.demo.command import main

__all__ = ["main"]
