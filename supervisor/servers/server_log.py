"""Each server's output: a size-rotated log file plus the last lines in memory.

A thread (not an async task) pumps the child's pipe, because both the pipe read and the file
write block; it keeps the last lines for exit classification and for "a server's recent log".
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from typing import IO

# A single line longer than this is split; tqdm-style progress output can run long.
_MAX_LINE = 64 * 1024


class ServerLog:
    def __init__(self, path: Path, max_bytes: int = 64 * 1024 * 1024, backups: int = 3,
                 tail_lines: int = 2000) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._count = 0  # lines ever seen, so a life can ask for "lines since my start"
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        self._size = 0

    # -- in-memory tail (any thread) --------------------------------------------------------

    @property
    def line_count(self) -> int:
        with self._lock:
            return self._count

    def tail(self, n: int) -> list[str]:
        with self._lock:
            if n <= 0:
                return []
            return list(self._tail)[-n:]

    def lines_since(self, mark: int) -> list[str]:
        with self._lock:
            wanted = min(self._count - mark, len(self._tail))
            return list(self._tail)[len(self._tail) - wanted:] if wanted > 0 else []

    # -- file (blocking: pump thread or a worker thread only) -------------------------------

    def _open(self) -> IO[bytes]:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab")
            self._size = self._file.tell()
        return self._file

    def _rotate(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.backups <= 0:
            self.path.unlink(missing_ok=True)
            return
        for i in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
        if self.path.exists():
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))

    def write_line(self, line: str) -> None:
        data = (line + "\n").encode("utf-8", "replace")
        with self._lock:
            self._tail.append(line)
            self._count += 1
            f = self._open()
            if self._size and self._size + len(data) > self.max_bytes:
                self._rotate()
                f = self._open()
            f.write(data)
            f.flush()
            self._size += len(data)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def pump(self, pipe: IO[bytes], header: str) -> threading.Thread:
        """Start a daemon thread copying `pipe` into the log until EOF."""

        def run() -> None:
            self.write_line(f"===== {time.strftime('%Y-%m-%dT%H:%M:%S%z')} {header}")
            try:
                while True:
                    raw = pipe.readline(_MAX_LINE)
                    if not raw:
                        break
                    self.write_line(raw.decode("utf-8", "replace").rstrip("\r\n"))
            finally:
                pipe.close()

        # daemon: a grandchild that escaped its process group could hold the pipe open forever.
        t = threading.Thread(target=run, name=f"log-pump {self.path.name}", daemon=True)
        t.start()
        return t
