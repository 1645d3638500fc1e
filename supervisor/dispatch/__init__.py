"""Dispatch: keep every READY server's slots full, check each completion, measure rates."""
