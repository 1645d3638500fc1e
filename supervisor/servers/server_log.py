"""Each server's output: a size-rotated log file that the server writes itself, followed by
the daemon, which keeps the last lines in memory.

The server's stdout and stderr are the log FILE (opened for appending), never a pipe to
the daemon: a pipe dies with the daemon, and the server's next write then meets EPIPE (or
SIGPIPE), which can take a loaded server down with it. With a file the server outlives the
daemon (a crash, an upgrade), and the next daemon follows the same file. systemd's
`StandardOutput=append:` gives a unit's server the same file, so every launcher is read
the same way (launcher.py).

A thread (not an async task) follows the file, because reading it blocks; it keeps the last
lines for exit classification and for "a server's recent log". Rotation is copy-then-
truncate (a server cannot be asked to reopen its log): the server keeps its descriptor, and
its O_APPEND writes land at the new end after the truncation. The copy reads the file to its
end through the descriptor that then truncates it, and the follower's tail is fed from the
same reads, so only a write that lands between the last read (which found the end) and the
truncation is lost: the gap between two system calls, not the length of a copy.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from pathlib import Path

# A single line longer than this is split; tqdm-style progress output can run long.
_MAX_LINE = 64 * 1024
# How often the follower looks for new output; the exit classifier reads the last lines
# only after `catch_up()`, so this bounds the "recent log" view's delay, nothing else.
FOLLOW_INTERVAL_S = 0.2
# Where a follower that joins a running server (adoption) starts reading back from, for the
# recent-log view: enough for the in-memory tail, not a whole 64 MiB file.
_BACKFILL_BYTES = 256 * 1024


class ServerLog:
    def __init__(self, path: Path, max_bytes: int = 64 * 1024 * 1024, backups: int = 3,
                 tail_lines: int = 2000) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._count = 0  # lines ever seen, so a life can ask for "lines since my start"
        self._lock = threading.Lock()       # the tail and the counter
        self._read_lock = threading.Lock()  # the file offset: one reader at a time
        self._offset = 0
        self._partial = b""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

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

    def _keep(self, line: str) -> None:
        with self._lock:
            self._tail.append(line)
            self._count += 1

    # -- the file (blocking: the follower thread or a worker thread only) -------------------

    def open_for_server(self) -> int:
        """A descriptor appending to the log, for a launched server's stdout and stderr
        (the caller closes its copy once the child has it)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)

    def write_header(self, text: str) -> None:
        """A `=====` line of our own before a launch (time and what starts), read back in
        order with the server's output."""
        line = f"===== {time.strftime('%Y-%m-%dT%H:%M:%S%z')} {text}\n"
        fd = self.open_for_server()
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        finally:
            os.close(fd)

    def write_line(self, line: str) -> None:
        """Append one line and read it back (tests and tools; a server writes its own)."""
        fd = self.open_for_server()
        try:
            os.write(fd, (line + "\n").encode("utf-8", "replace"))
        finally:
            os.close(fd)
        self.catch_up()

    def skip_to_end(self, backfill: bool = False) -> None:
        """Follow from the file's end from now on: a launch reads only what comes after it.
        `backfill`: first load the file's last lines into the tail (a server adopted from an
        earlier daemon: its recent log is what it wrote before we came), then mark them read,
        so `lines_since(line_count)` holds only what this daemon saw."""
        with self._read_lock:
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            if backfill and size:
                start = max(0, size - _BACKFILL_BYTES)
                with open(self.path, "rb") as f:
                    f.seek(start)
                    data = f.read(size - start)
                lines = data.split(b"\n")
                if start:
                    lines = lines[1:]      # the first one is cut
                for raw in lines[:-1] if not lines[-1] else lines:
                    self._keep(raw.decode("utf-8", "replace").rstrip("\r"))
            self._offset, self._partial = size, b""

    def catch_up(self, final: bool = False) -> int:
        """Read what the server wrote since the last read into the tail; rotate the file
        when it is over `max_bytes`. `final`: the server is gone, so a last line without a
        newline is kept too. Returns the number of new lines."""
        with self._read_lock:
            n = self._read_new()
            if final and self._partial:
                self._keep(self._partial.decode("utf-8", "replace").rstrip("\r"))
                self._partial = b""
                n += 1
            if self._offset > self.max_bytes:
                self._rotate()
            return n

    def _read_new(self) -> int:
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            self._offset, self._partial = 0, b""
            return 0
        n = 0
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < self._offset:
                # Truncated or replaced under us (rotated by someone else): from the top.
                self._offset, self._partial = 0, b""
            f.seek(self._offset)
            while True:
                chunk = f.read(1024 * 1024)
                if not chunk:
                    break
                n += self._feed(chunk)
        return n

    def _feed(self, chunk: bytes) -> int:
        """The file's next bytes after `_offset` into the tail, as lines."""
        n = 0
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            n += self._keep_raw(raw)
        while len(self._partial) >= _MAX_LINE:
            n += self._keep_raw(self._partial[:_MAX_LINE])
            self._partial = self._partial[_MAX_LINE:]
        return n

    def _keep_raw(self, raw: bytes) -> int:
        n = 0
        while len(raw) > _MAX_LINE:
            self._keep(raw[:_MAX_LINE].decode("utf-8", "replace"))
            raw = raw[_MAX_LINE:]
            n += 1
        self._keep(raw.decode("utf-8", "replace").rstrip("\r"))
        return n + 1

    def _rotate(self) -> None:
        """Copy to `.1` (older copies shifted up), then truncate in place: the server's
        descriptor stays valid and its O_APPEND writes go to the new end. One descriptor reads
        the file to its end, copying it and feeding the tail with what the follower had not
        read yet, and truncates right after the read that found the end."""
        backup = None
        if self.backups > 0:
            for i in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{i}")
                if older.exists():
                    older.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
            backup = open(self.path.with_name(f"{self.path.name}.1"), "wb")
        try:
            with open(self.path, "r+b") as f:
                at = 0
                while True:
                    chunk = f.read(1024 * 1024)
                    if not chunk:
                        break
                    if backup is not None:
                        backup.write(chunk)
                    if at + len(chunk) > self._offset:
                        self._feed(chunk[max(0, self._offset - at):])
                    at += len(chunk)
                f.truncate(0)
        finally:
            if backup is not None:
                backup.close()
        self._offset = 0

    # -- the follower thread ----------------------------------------------------------------

    def follow(self) -> None:
        """Start following the file in a daemon thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()

        def run() -> None:
            while not self._stop.wait(FOLLOW_INTERVAL_S):
                try:
                    self.catch_up()
                except OSError:
                    continue    # a full disk or a rotation race: the next round reads on

        # daemon: it holds nothing that needs a clean end; close() stops it.
        self._thread = threading.Thread(target=run, name=f"log-follow {self.path.name}",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        self._thread = None
