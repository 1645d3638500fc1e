"""The deadlines of one server's streamed requests, kept by one task for the whole server.

Each stream pushes its own deadline back as its tokens arrive (an attribute set: no task
switch, no timer); the sweeper looks at every open stream each tick. When one has gone
`stall_s` without a token, or past its whole-request timeout, the sweeper asks the server to
abort it by its request id while the stream is still open, so the server ends it as an
abort, with the usage of what it cost; a stream the server does not end within
`ABORT_DRAIN_S` after that is cut (its read cancelled).

Silent is not always stuck. SGLang admits requests by KV token budget, not only by
--max-running-requests: the rest wait in its queue with no token, and under KV pressure it
retracts running requests back to the queue, silent until memory frees
(`sglang/srt/managers/scheduler.py` get_next_batch_to_run; `schedule_batch.py`
retract_decode, "KV cache pool is full. Retract requests"). So a stream past `stall_s` while
the server made a token for another stream (or SGLang's decode counter moved) within the
last `stall_s` is *waiting*: counted (`waiting`, the status shows it), and aborted only past
`wait_s` without a token. One aborted while its server was silent for `stall_s` too is
`server_silent`: only those count toward calling the server hung (stall_watch.py).

The sweeper also keeps the server's token clock, `latest_token` (the newest token any of
its streams produced), for the fleet's hang watchdog (servers/hang_rule.py), and publishes
it and `waiting` on the server's progress record each tick.

Why not a watcher beside each request: that is a task group, a task and a timer per request,
on the dispatch path of every streamed request (benchmarks/bench_dispatch.py). Why not a moving deadline
on the read itself: cancelling a read closes its connection at once, so the server
would see a client gone before the abort named the request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

log = logging.getLogger("supervisor.dispatch")

ABORT_DRAIN_S = 5.0      # after an abort, for the stream's end (a stuck server may never send
                         # it: then the stream is cut and the count is the last one seen)
MAX_TICK_S = 1.0         # a stall is seen at most this late (or a quarter of stall_s)


def current_clock() -> Callable[[], float]:
    """The clock anyio.current_time() reads, as a function to call per token: on asyncio
    the running loop's own `time` (what anyio returns, without its per-call lookup of the
    running library); anyio's function on any other backend."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:
        return anyio.current_time


@dataclass(eq=False)
class StreamDeadline:
    rid: str
    stall_s: float
    give_up_at: float
    last_token: float
    wait_s: float = float("inf")        # silent while the server streams for others
    opened: float = 0.0                 # when it was sent (last_token past it: a token came)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    expired: str | None = None          # "stall" or "timeout": the sweeper aborted it
    cut_at: float | None = None         # past this the read is cancelled
    waiting: bool = False               # silent past stall_s, the server streaming for others
    waited: bool = False                # it was waiting at some point
    server_silent: bool = False         # aborted while the server made no token for stall_s

    def due(self) -> float:
        return min(self.last_token + self.stall_s, self.give_up_at)


class StreamDeadlines:
    """`abort(rid)` asks the server to stop a request; `run()` is the sweeper's task."""

    def __init__(self, abort: Callable[[str], Coroutine[Any, Any, object]], progress: Any = None,
                 server_tokens_at: Callable[[], float | None] | None = None) -> None:
        self._abort = abort
        self._open: set[StreamDeadline] = set()
        self._tick_s = MAX_TICK_S
        # Where `last_token_at` and `waiting` are published (the server's ServerProgress).
        self._progress = progress
        # When SGLang's own decode-token counter last moved (monotonic), where it is read.
        self._server_tokens_at = server_tokens_at
        self.latest_token: float | None = None
        self.waiting = 0

    @contextmanager
    def watch(self, rid: str, stall_s: float, give_up_at: float,
              wait_s: float = float("inf")) -> Iterator[StreamDeadline]:
        """Read the stream inside `with deadline.scope:`, setting `last_token` per token."""
        now = anyio.current_time()
        d = StreamDeadline(rid, stall_s, give_up_at, now, wait_s=max(wait_s, stall_s),
                           opened=now)
        self._tick_s = min(self._tick_s, max(0.01, stall_s / 4))
        self._open.add(d)
        try:
            yield d
        finally:
            self._open.discard(d)
            self._saw(d)

    def _saw(self, d: StreamDeadline) -> None:
        if d.last_token > d.opened and (self.latest_token is None
                                        or d.last_token > self.latest_token):
            self.latest_token = d.last_token
            if self._progress is not None:
                self._progress.last_token_at = d.last_token

    def _server_token_at(self) -> float | None:
        """The newest token the server made for anyone: our streams, or its own counter."""
        at = self.latest_token
        if self._server_tokens_at is not None:
            other = self._server_tokens_at()
            if other is not None and (at is None or other > at):
                at = other
        return at

    async def abort(self, rid: str) -> None:
        """Ask the server to stop `rid` now (a loop seen by the stream's reader)."""
        await self._abort(rid)

    @staticmethod
    def drain(d: StreamDeadline, seconds: float) -> None:
        """We aborted it ourselves (a loop): the end may take `seconds`, then it is cut."""
        d.cut_at = anyio.current_time() + seconds

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                await anyio.sleep(self._tick_s)
                now = anyio.current_time()
                open_now = list(self._open)
                for d in open_now:
                    self._saw(d)
                server_at = self._server_token_at()
                waiting = 0
                for d in open_now:
                    if d.cut_at is not None:
                        if now >= d.cut_at:
                            d.scope.cancel()
                        continue
                    if now < d.due():
                        d.waiting = False
                        continue
                    timeout = now >= d.give_up_at
                    serving_others = server_at is not None and server_at > d.last_token \
                        and now - server_at < d.stall_s
                    if not timeout and serving_others and now < d.last_token + d.wait_s:
                        d.waiting = d.waited = True
                        waiting += 1
                        continue
                    d.waiting = False
                    d.server_silent = not serving_others
                    d.expired = "timeout" if timeout else "stall"
                    d.cut_at = now + ABORT_DRAIN_S
                    tg.start_soon(self._abort, d.rid)
                self.waiting = waiting
                if self._progress is not None:
                    self._progress.waiting = waiting
