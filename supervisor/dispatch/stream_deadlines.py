"""The deadlines of one server's streamed requests, kept by one task for the whole server.

Each stream pushes its own deadline back as its tokens arrive (an attribute set: no task
switch, no timer); the sweeper looks at every open stream each tick. When one has gone
`stall_s` without a token, or past its whole-request timeout, the sweeper asks the server to
abort it by its request id while the stream is still open, so the server ends it as an
abort, with the usage of what it cost; a stream the server does not end within
`ABORT_DRAIN_S` after that is cut (its read cancelled).

Why not a watcher beside each request: that is a task group, a task and a timer per request,
on the dispatch path of every streamed request (benchmarks/bench_dispatch.py). Why not a moving deadline
on the read itself: cancelling a read closes its connection at once, so the server
would see a client gone before the abort named the request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import anyio

log = logging.getLogger("supervisor.dispatch")

ABORT_DRAIN_S = 5.0      # after an abort, for the stream's end (a stuck server may never send
                         # it: then the stream is cut and the count is the last one seen)
MAX_TICK_S = 1.0         # a stall is seen at most this late (or a quarter of stall_s)


@dataclass(eq=False)
class StreamDeadline:
    rid: str
    stall_s: float
    give_up_at: float
    last_token: float
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    expired: str | None = None          # "stall" or "timeout": the sweeper aborted it
    cut_at: float | None = None         # past this the read is cancelled

    def due(self) -> float:
        return min(self.last_token + self.stall_s, self.give_up_at)


class StreamDeadlines:
    """`abort(rid)` asks the server to stop a request; `run()` is the sweeper's task."""

    def __init__(self, abort: Callable[[str], Awaitable[object]]) -> None:
        self._abort = abort
        self._open: set[StreamDeadline] = set()
        self._tick_s = MAX_TICK_S

    @contextmanager
    def watch(self, rid: str, stall_s: float, give_up_at: float) -> Iterator[StreamDeadline]:
        """Read the stream inside `with deadline.scope:`, setting `last_token` per token."""
        d = StreamDeadline(rid, stall_s, give_up_at, anyio.current_time())
        self._tick_s = min(self._tick_s, max(0.01, stall_s / 4))
        self._open.add(d)
        try:
            yield d
        finally:
            self._open.discard(d)

    @staticmethod
    def drain(d: StreamDeadline, seconds: float) -> None:
        """We aborted it ourselves (a loop): the end may take `seconds`, then it is cut."""
        d.cut_at = anyio.current_time() + seconds

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                await anyio.sleep(self._tick_s)
                now = anyio.current_time()
                for d in list(self._open):
                    if d.cut_at is not None:
                        if now >= d.cut_at:
                            d.scope.cancel()
                    elif now >= d.due():
                        d.expired = "timeout" if now >= d.give_up_at else "stall"
                        d.cut_at = now + ABORT_DRAIN_S
                        tg.start_soon(self._abort, d.rid)
