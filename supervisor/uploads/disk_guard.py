"""Pause dispatch before the shard directory's disk fills up.

A full disk is where results get lost: a shard that cannot be written leaves done results
only in the DB, and SQLite itself stops committing. So when free space under the shard
directory falls below `uploads.min_free_bytes`, dispatch pauses (the job pauses and resumes
the dispatcher from `paused_reason()`); in-flight requests still finish and are recorded,
uploads keep running and free the spool. Dispatch resumes once free space is back above the
threshold plus a margin, so a disk hovering at the line does not flap pause/resume.

Free space is sampled in a worker thread by `run()`: statvfs on a stalled network mount can
block, and the event loop must never wait on it. `free_bytes` is injectable for tests.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import anyio

log = logging.getLogger("supervisor.uploads")

RESUME_MARGIN = 0.10       # resume at min_free_bytes × 1.10
SAMPLE_INTERVAL_S = 2.0


def disk_free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    # f_bavail, not f_bfree: blocks reserved for root are not ours to fill.
    return st.f_bavail * st.f_frsize


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB"


class DiskGuard:
    def __init__(self, path: Path, min_free_bytes: int, *,
                 free_bytes: Callable[[Path], int] | None = None,
                 interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.path = Path(path)
        self.min_free_bytes = min_free_bytes
        self.resume_free_bytes = int(min_free_bytes * (1 + RESUME_MARGIN))
        # None: this module's disk_free_bytes, looked up at each sample (patchable).
        self.free_bytes = free_bytes
        self.interval_s = interval_s
        self.last_free: int | None = None
        self._reason: str | None = None

    def check(self) -> str | None:
        """Sample free space now (blocking) and return the pause reason, if any."""
        if self.min_free_bytes <= 0:
            return None
        try:
            free = (self.free_bytes or disk_free_bytes)(self.path)
        except OSError as exc:
            # Not knowing is not a reason to stop a day-long job; say so and keep the verdict.
            log.warning("disk guard: cannot read free space of %s: %s", self.path, exc)
            return self._reason
        self.last_free = free
        if self._reason is None and free < self.min_free_bytes:
            self._reason = (f"low disk: {_mb(free)} free under {self.path} "
                            f"(threshold {_mb(self.min_free_bytes)})")
            log.warning("disk guard: %s", self._reason)
        elif self._reason is not None and free >= self.resume_free_bytes:
            log.info("disk guard: %s free under %s again", _mb(free), self.path)
            self._reason = None
        return self._reason

    def paused_reason(self) -> str | None:
        """The latest verdict (cheap, for the event loop); `run()` keeps it current."""
        return self._reason

    async def run(self) -> None:
        while True:
            await anyio.to_thread.run_sync(self.check)
            await anyio.sleep(self.interval_s)
