"""The batch scheduler's one property the daemon depends on: at most --max-running-requests
requests decode at once; the rest wait in a queue, first come first served.

The counters here feed /metrics (sglang:num_running_reqs, sglang:num_queue_reqs,
sglang:generation_tokens_total) and /server_info, and the peaks let a test prove the limit
held without sampling at the right instant. (sglang:gen_throughput is measured where the
tokens are generated: decode_meter.py.)
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator

import anyio


@dataclass
class BatchStats:
    running: int = 0
    queued: int = 0
    peak_running: int = 0
    peak_queued: int = 0
    requests_total: int = 0          # finished (answered) requests
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    # KV tokens held by the running requests (prompt + the whole planned output, reserved at
    # admission): the numerator of sglang:token_usage.
    kv_tokens: int = 0


class Aborted(Exception):
    """The request was aborted while it waited in the queue."""


class BatchSlots:
    def __init__(self, max_running: int) -> None:
        self.max_running = max_running
        self._slots = anyio.Semaphore(max_running)
        self.stats = BatchStats()

    async def _acquire_unless(self, abort: anyio.Event) -> bool:
        """Wait for a slot; False (and no slot) if `abort` is set first."""
        got = False
        async with anyio.create_task_group() as tg:
            async def acquire() -> None:
                nonlocal got
                await self._slots.acquire()
                got = True
                tg.cancel_scope.cancel()

            async def watch() -> None:
                await abort.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(acquire)
            tg.start_soon(watch)
        return got

    @asynccontextmanager
    async def slot(self, kv_tokens: int = 0,
                   abort: anyio.Event | None = None) -> AsyncIterator[None]:
        """Hold one decode slot (and `kv_tokens` of the KV pool); waits in the queue while all
        slots are taken. Raises Aborted if `abort` is set while it waits."""
        s = self.stats
        try:
            self._slots.acquire_nowait()      # a free slot: never counted as queued
        except anyio.WouldBlock:
            s.queued += 1
            s.peak_queued = max(s.peak_queued, s.queued)
            try:
                if abort is None:
                    await self._slots.acquire()
                elif not await self._acquire_unless(abort):
                    raise Aborted() from None
            finally:
                s.queued -= 1
        s.running += 1
        s.kv_tokens += kv_tokens
        s.peak_running = max(s.peak_running, s.running)
        try:
            yield
        finally:
            s.running -= 1
            s.kv_tokens -= kv_tokens
            self._slots.release()

    def finished(self, prompt_tokens: int, completion_tokens: int) -> None:
        s = self.stats
        s.requests_total += 1
        s.prompt_tokens_total += prompt_tokens
        s.generation_tokens_total += completion_tokens
