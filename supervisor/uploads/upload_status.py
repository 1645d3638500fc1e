"""The upload figures the status snapshot carries, and the window behind the upload rate."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class UploadStatus:
    destination: str               # s3://bucket/prefix/ or a directory
    remote: bool                   # False for a local output directory
    backlog_shards: int            # assigned or written, not yet verified at the destination
    backlog_bytes: int
    uploaded_shards: int           # verified at the destination (whole job, from the DB)
    uploaded_bytes: int
    in_flight: int
    bytes_per_s: float             # over the last RATE_WINDOW_S seconds
    shards_per_s: float
    last_success_at: float | None  # unix seconds
    consecutive_failures: int
    last_error: str | None
    corrupt_total: int             # uploads caught holding the wrong bytes (this run)
    stopped: str | None            # why uploads stopped (credentials, bucket), until restart


RATE_WINDOW_S = 60.0


class UploadRateWindow:
    """Bytes and shards verified over the last `window_s` seconds. `add`/`rates` are called
    from the event loop only, so no lock."""

    def __init__(self, window_s: float = RATE_WINDOW_S, limit: int = 10_000) -> None:
        self.window_s = window_s
        # Bounded: at most `limit` uploads remembered, far more than a minute ever holds.
        self._events: deque[tuple[float, int]] = deque(maxlen=limit)

    def add(self, now: float, nbytes: int) -> None:
        self._events.append((now, nbytes))

    def rates(self, now: float) -> tuple[float, float]:
        """(bytes/s, shards/s) over the window."""
        while self._events and self._events[0][0] < now - self.window_s:
            self._events.popleft()
        if not self._events:
            return 0.0, 0.0
        total = sum(b for _, b in self._events)
        return total / self.window_s, len(self._events) / self.window_s
