"""The demo's live progress line: redrawn in place on a terminal, one line every few seconds
otherwise (a log file or a pipe)."""

from __future__ import annotations

import time
from typing import Any

from supervisor.job.progress_line import progress_line


class ProgressPrinter:
    def __init__(self, stream: Any, interval_s: float) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.interval_s = interval_s
        self._last = 0.0
        self._width = 0

    def __call__(self, status: Any) -> None:
        line = progress_line(status)
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
            self.stream.flush()
        elif time.monotonic() - self._last >= self.interval_s or status.finished:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last = time.monotonic()

    def end(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
