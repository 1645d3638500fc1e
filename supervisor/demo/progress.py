"""The demo's live progress line: redrawn in place on a terminal, fitted to its width (read
at each redraw, so a resized window is followed); one whole line every few seconds otherwise
(a log file or a pipe keeps every figure)."""

from __future__ import annotations

import os
import time
from typing import Any

from supervisor.job.progress_line import progress_line

# Carriage return, then erase to the end of the line: a shorter line leaves nothing behind.
REDRAW = "\r\x1b[K"


def terminal_columns(stream: Any, default: int = 80) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or default
    except (OSError, ValueError, AttributeError):
        return default


class ProgressPrinter:
    def __init__(self, stream: Any, interval_s: float) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.interval_s = interval_s
        self._last = 0.0
        self._drawn = False

    def __call__(self, status: Any) -> None:
        if self.tty:
            # One column short of the edge: writing into the last column makes some
            # terminals wrap at once, and the next redraw would then start a line too low.
            line = progress_line(status, width=max(20, terminal_columns(self.stream) - 1),
                                 daemon=False)
            self.stream.write(REDRAW + line)
            self._drawn = True
            self.stream.flush()
        elif time.monotonic() - self._last >= self.interval_s or status.finished:
            self.stream.write(progress_line(status, daemon=False) + "\n")
            self.stream.flush()
            self._last = time.monotonic()

    def end(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
