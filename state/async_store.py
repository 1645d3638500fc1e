"""The store from async code: every call runs in a worker thread, one at a time.

SQLite work (a group commit, an fsync) takes milliseconds to tens of milliseconds; on the
event loop that would stall every HTTP request in flight. One worker at a time
(CapacityLimiter(1)) because the store has a single connection and serialises anyway, and
queueing here rather than in threads parked on the store's lock keeps the thread pool free.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, TypeVar

import anyio

from state.store import Store

T = TypeVar("T")


class AsyncStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._limiter = anyio.CapacityLimiter(1)

    async def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`await astore.call(Store.counts)` or `await astore.call(store.claim, 8, "gpu0", now)`:
        an unbound Store method gets this store as `self`; a bound one is called as is.
        A call that has started in its thread is never abandoned by a cancellation (the
        thread runs to completion and its result is committed), so a claim can't be lost."""
        if inspect.ismethod(method):
            fn = functools.partial(method, *args, **kwargs)
        else:
            fn = functools.partial(method, self.store, *args, **kwargs)
        return await anyio.to_thread.run_sync(fn, limiter=self._limiter)

    async def close(self) -> None:
        await anyio.to_thread.run_sync(self.store.close, limiter=self._limiter)
