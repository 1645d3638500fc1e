"""One server's live in-flight limit: the saturation watch (saturation_watch.py) moves it, the
dispatcher's workers honour it (dispatch/feeding.py). Here, below both, so each imports it
downward.

A READY life starts with `max_running` workers and the limit at `max_running`; the
saturation guard (servers/saturation_guard.py) may lower it and raise it back while the
server runs. Each worker holds a slot for as long as its request is on the wire, so a
lowered limit never cancels a request in flight: the workers beyond it finish what they
sent and then wait for a slot before they send the next one.

On top of the limit, `ahead` requests more may be on the wire (`dispatch.queue_ahead`): they
wait in SGLang's own queue, so a slot that frees is refilled by SGLang's scheduler at its
next step instead of after our next request's round trip and admission (the freed slot's
idle time; benchmarks/bench_queue_ahead.py measures it). The guard moves only the limit:
the queue ahead is the same few requests whatever SGLang runs, and the guard reads SGLang's
queue net of it (queue_ahead.py).

A counter and an event rather than anyio's CapacityLimiter: taking a free slot must cost
nothing on every request's path (the limiter's acquire yields to the event loop each time,
~10 µs a request on the dispatch benchmark's instant servers), and only a worker beyond
the limit ever waits.
"""

from __future__ import annotations

from types import TracebackType

import anyio


class InFlightLimit:
    def __init__(self, max_running: int, ahead: int = 0) -> None:
        if max_running < 1:
            raise ValueError(f"in-flight limit: max_running must be at least 1, "
                             f"got {max_running}")
        if ahead < 0:
            raise ValueError(f"in-flight limit: ahead must be at least 0, got {ahead}")
        self.max = max_running
        self.ahead = ahead                  # requests queued in SGLang beyond what it runs
        self.reason: str | None = None      # why it is below the max, while it is
        self._limit = max_running
        self.held = 0                       # slots taken: requests on the wire
        self._freed: anyio.Event | None = None   # set when a waiter may find a slot

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def capacity(self) -> int:
        """Requests on the wire at most now: the limit and the queue ahead."""
        return self._limit + self.ahead

    @property
    def lowered(self) -> bool:
        return self._limit < self.max

    def set(self, value: int, reason: str | None = None) -> int:
        """Set the limit (clamped to 1..max); returns the limit now in force. Holders
        keep their slots; a raise lets waiters in at once."""
        value = max(1, min(self.max, int(value)))
        self._limit = value
        self.reason = reason if value < self.max else None
        self._wake()
        return value

    def slot(self) -> InFlightLimit:
        """`async with limit.slot():` held while one request is on the wire."""
        return self

    async def __aenter__(self) -> None:
        # No await between the check and the increment: one event loop, so no other
        # task can take the slot in between.
        while self.held >= self._limit + self.ahead:
            if self._freed is None:
                self._freed = anyio.Event()
            await self._freed.wait()
        self.held += 1

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self.held -= 1
        self._wake()

    def _wake(self) -> None:
        if self._freed is not None and self.held < self._limit + self.ahead:
            self._freed.set()
            self._freed = None
