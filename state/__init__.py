"""The job's state DB: the only code that touches SQLite. See state/README.md."""
