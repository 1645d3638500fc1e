"""The store from async code: every call runs in one worker thread of its own, one at a time.

SQLite work (a group commit, an fsync) takes milliseconds to tens of milliseconds; on the
event loop that would stall every HTTP request in flight. One thread because the store has a
single connection and serialises anyway.

Why a thread of its own rather than `anyio.to_thread` behind a limiter of one: with a
limiter, each call's turn is handed to the next by the event loop (the finished call's task
resumes and releases the limiter, the next one wakes and starts its thread), so the store
did one call per loop turn. On a daemon whose loop is saturated by streamed chunks a turn
takes tens of milliseconds: calls of a few milliseconds waited 100-300 ms each in the queue,
and a status snapshot's reads, one after another, waited over a second
(`benchmarks/bench_seed_scale.py`). Here the worker takes the next call as soon as one ends;
the loop is needed only to hand a result back to its caller.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from state.store import Store

T = TypeVar("T")


class _Call:
    """One call on its way through the worker. `ticket` is taken once, without waiting, by
    whoever comes first: the worker (it runs the call) or its cancelled caller (it never
    runs)."""
    __slots__ = ("fn", "ticket", "result", "error", "wake")

    def __init__(self, fn: Callable[[], Any], wake: Callable[[], object]) -> None:
        self.fn = fn
        self.ticket = threading.Lock()
        self.result: Any = None
        self.error: BaseException | None = None
        self.wake = wake


def _serve(calls: queue.SimpleQueue[_Call | None]) -> None:
    """The worker: calls in order until told to stop (None). It holds the queue alone, not
    the AsyncStore, so an AsyncStore nobody closed is still collected (and stops this)."""
    while (call := calls.get()) is not None:
        if not call.ticket.acquire(blocking=False):
            continue                      # withdrawn by its cancelled caller
        try:
            call.result = call.fn()
        except BaseException as exc:      # handed to the caller, raised there
            call.error = exc
        try:
            call.wake()
        except RuntimeError:
            pass                          # the caller's loop is gone (interpreter exit)
        del call


class AsyncStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._calls: queue.SimpleQueue[_Call | None] | None = None

    def _queue(self) -> queue.SimpleQueue[_Call | None]:
        if self._calls is None:
            calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
            self._calls = calls
            threading.Thread(target=_serve, args=(calls,), name="state-store",
                             daemon=True).start()
            weakref.finalize(self, calls.put, None)
        return self._calls

    async def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`await astore.call(Store.counts)` or `await astore.call(store.claim, 8, "gpu0", now)`:
        an unbound Store method gets this store as `self`; a bound one is called as is.
        A call that has started in its thread is never abandoned by a cancellation (the
        thread runs to completion and its result is committed), so a claim can't be lost;
        one cancelled while still queued never runs."""
        if inspect.ismethod(method):
            fn = functools.partial(method, *args, **kwargs)
        else:
            fn = functools.partial(method, self.store, *args, **kwargs)
        loop = asyncio.get_running_loop()
        done = anyio.Event()
        call = _Call(fn, functools.partial(loop.call_soon_threadsafe, done.set))
        self._queue().put(call)
        try:
            await done.wait()
        except BaseException:
            if call.ticket.acquire(blocking=False):
                raise                     # still queued: withdrawn, it never runs
            with anyio.CancelScope(shield=True):
                await done.wait()         # it started: let it finish (and commit)
            raise
        if call.error is not None:
            raise call.error
        return call.result

    async def close(self) -> None:
        """Close the store after every call queued before this one; the worker then ends."""
        try:
            await self.call(Store.close)
        finally:
            if self._calls is not None:
                self._calls.put(None)
                self._calls = None        # a later call gets a worker of its own
