"""One daemon per job: an exclusive flock on `<state DB>.lock`, held for the daemon's life.

flock rather than a pid file: the kernel drops the lock the instant its holder dies (SIGKILL,
OOM, a power cut ends everything anyway), so a stale lock never needs a human, and a pid
number reused by another program can never look like a live daemon. The pid written into the
file is only for the message a second daemon prints.

The lock file is never deleted: unlinking it while another process waits on the old inode
would let two processes each "hold" a lock on different files. Commands that write the DB
offline (import, requeue, rebuild-state, verify's rewrite marks) take the same lock, so
nothing writes beside a running daemon.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_SUFFIX = ".lock"


class JobLocked(RuntimeError):
    """Another process holds the job's lock."""

    def __init__(self, path: Path, pid: int | None) -> None:
        who = f"another daemon (pid {pid})" if pid else "another daemon"
        super().__init__(f"{who} runs this job (lock {path} is held)")
        self.path = path
        self.pid = pid


def lock_path_for(state_path: str | Path) -> Path:
    state_path = Path(state_path)
    return state_path.with_name(state_path.name + LOCK_SUFFIX)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class JobLock:
    """`acquire()` or JobLocked; `release()` (or process exit) lets the next daemon in."""

    def __init__(self, state_path: str | Path) -> None:
        self.path = lock_path_for(state_path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> JobLock:
        if self._fd is not None:
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise JobLocked(self.path, pid) from None
        except BaseException:
            os.close(fd)
            raise
        # O_CLOEXEC: server processes we spawn must not inherit the lock, or a server
        # outliving a SIGKILLed daemon would keep the next daemon out.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor drops the flock

    def __enter__(self) -> JobLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder_pid(state_path: str | Path) -> int | None:
    """The pid of the daemon holding the job's lock now (-1 when held but the pid is
    unreadable), or None when nobody holds it."""
    path = lock_path_for(state_path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
