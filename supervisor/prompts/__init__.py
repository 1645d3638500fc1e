"""A prompts file into the state DB: each line's shape and checks (prompt_line.py), the
import and its report (prompt_import.py)."""
