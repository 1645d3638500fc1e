"""The batch scheduler as the request handlers see it: a request waits in the queue until the
KV pool admits it and a running slot is free (at most --max-running-requests decode at
once), first come first served; while it runs it may be retracted back to the queue and wait
again (kv_pool.py has SGLang's rules).

The counters here feed /metrics (sglang:num_running_reqs, sglang:num_queue_reqs,
sglang:num_used_tokens, sglang:generation_tokens_total) and /server_info, and the peaks let a
test prove the limit held without sampling at the right instant. (sglang:gen_throughput is
measured where the tokens are generated: decode_meter.py.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import anyio

from .kv_pool import KVPool, Retracted, Seat


@dataclass
class BatchStats:
    running: int = 0
    queued: int = 0
    peak_running: int = 0
    peak_queued: int = 0
    requests_total: int = 0          # finished (answered) requests
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    # KV tokens held by the running requests (prompt + output so far): sglang:num_used_tokens.
    kv_tokens: int = 0


class Aborted(Exception):
    """The request was aborted while it waited in the queue."""


class BatchSlots:
    def __init__(self, max_running: int, capacity: int = 1 << 62,
                 steps: Callable[[], float] = lambda: 0.0,
                 on_retract: Callable[[Retracted], None] | None = None) -> None:
        self.max_running = max_running
        self.pool = KVPool(capacity, max_running, steps, on_retract)
        self._stats = BatchStats()

    @property
    def stats(self) -> BatchStats:
        s = self._stats
        s.running, s.queued = len(self.pool.running), len(self.pool.queue)
        s.kv_tokens = self.pool.used()
        return s

    def _peaks(self) -> None:
        s = self._stats
        s.peak_running = max(s.peak_running, len(self.pool.running))
        s.peak_queued = max(s.peak_queued, len(self.pool.queue))

    async def _wait_admitted(self, seat: Seat, abort: anyio.Event | None,
                             enqueue: bool = True) -> None:
        """Until the scheduler admits `seat`; Aborted (and out of the queue) if `abort` is
        set first."""
        if enqueue:
            self.pool.enqueue(seat)
        self._peaks()
        if seat.admitted.is_set():
            return
        if abort is None:
            await seat.admitted.wait()
            return
        async with anyio.create_task_group() as tg:
            async def wait(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()
            tg.start_soon(wait, seat.admitted)
            tg.start_soon(wait, abort)
        if not seat.admitted.is_set():
            self.pool.leave(seat)
            raise Aborted()

    @asynccontextmanager
    async def slot(self, seat: Seat | int = 0,
                   abort: anyio.Event | None = None) -> AsyncIterator[Seat]:
        """Hold a place in the running batch for `seat` (a bare number: a request of that
        many prompt tokens and no output budget); waits in the queue until it is admitted.
        Raises Aborted if `abort` is set while it waits. A retracted seat is back in the
        queue: `readmit` waits for its next turn."""
        if not isinstance(seat, Seat):
            seat = Seat(prompt_tokens=seat, max_new_tokens=0)
        await self._wait_admitted(seat, abort)
        try:
            yield seat
        finally:
            self.pool.leave(seat)

    async def readmit(self, seat: Seat, abort: anyio.Event | None = None) -> None:
        """After a retraction: wait in the queue (where the scheduler put it) to run again."""
        if seat.running:
            return
        await self._wait_admitted(seat, abort, enqueue=seat not in self.pool.queue)

    @contextmanager
    def decoding(self, seat: Seat) -> Iterator[None]:
        """Held while `seat` generates tokens (its KV grows with the meter's steps)."""
        self.pool.start_decoding(seat)
        try:
            yield
        finally:
            self.pool.stop_decoding(seat)

    def tick(self) -> Retracted | None:
        """One scheduler step: retract if the next decode does not fit, then admit."""
        result = self.pool.check_decode()
        self._peaks()
        return result

    def finished(self, prompt_tokens: int, completion_tokens: int) -> None:
        s = self._stats
        s.requests_total += 1
        s.prompt_tokens_total += prompt_tokens
        s.generation_tokens_total += completion_tokens
