"""What `dflash-supervisor demo` (supervisor/commands/demo.py) is built from: its config
(config.py), its built-in prompt set (prompts.py), its progress line (progress.py), the TUI
beside it (with_tui.py) and its servers' ports (free_ports.py)."""
