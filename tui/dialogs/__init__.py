"""Modal dialogs: each asks one question and dismisses with the answer (None: cancelled)."""
