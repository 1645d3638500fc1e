"""Group commit for outcomes: every finished request's outcome is queued here, and one
background task writes whatever has accumulated in one store transaction.

One transaction per completion would cap the job at a few thousand completions/s on a good
disk and far fewer on a network volume; batching what arrives while the previous commit is
running costs no latency when the load is light and scales when it is heavy. Each outcome is
still atomic: a batch commits whole or not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import anyio

log = logging.getLogger("supervisor.dispatch")


class Recorder:
    def __init__(self, write: Callable[[list[Any]], Any], max_batch: int = 1000,
                 on_committed: Callable[[list[Any]], None] | None = None,
                 attempts: int = 5) -> None:
        self._write = write               # async: commits a list of outcomes
        self._max_batch = max_batch
        self._on_committed = on_committed
        self._attempts = attempts
        self._queue: list[Any] = []
        self._waiters: list[tuple[int, anyio.Event]] = []
        self._queued_total = 0            # outcomes ever queued
        self._committed_total = 0         # outcomes ever committed
        self._wake = anyio.Event()
        self._closing = False
        self._stopped = anyio.Event()
        self.error: BaseException | None = None

    @property
    def backlog(self) -> int:
        return len(self._queue)

    def submit(self, outcomes: Sequence[Any]) -> None:
        if self._closing:
            raise RuntimeError("recorder is closed")
        self._queue.extend(outcomes)
        self._queued_total += len(outcomes)
        self._wake.set()

    async def flush(self) -> None:
        """Until everything submitted so far is committed."""
        target = self._queued_total
        if self._committed_total >= target:
            return
        if self.error is not None:
            raise RuntimeError("outcomes could not be recorded") from self.error
        event = anyio.Event()
        self._waiters.append((target, event))
        self._wake.set()
        await event.wait()
        if self._committed_total < target:
            raise RuntimeError("outcomes could not be recorded") from self.error

    async def run(self) -> None:
        """The commit loop. Shielded: it must outlive every task that submits to it, even
        under a cancellation of the whole job, and stops only through close()."""
        with anyio.CancelScope(shield=True):
            try:
                while True:
                    if not self._queue:
                        if self._closing:
                            return
                        self._wake = anyio.Event()
                        await self._wake.wait()
                        continue
                    batch = self._queue[: self._max_batch]
                    del self._queue[: len(batch)]
                    await self._commit(batch)
                    self._committed_total += len(batch)
                    self._release()
                    if self._on_committed is not None:
                        self._on_committed(batch)
            except BaseException as exc:
                self.error = exc
                log.error("recording outcomes failed: %r", exc)
                raise
            finally:
                self._release(all_=True)
                self._stopped.set()

    async def _commit(self, batch: list[Any]) -> None:
        # A locked or briefly full disk should not lose results: retry, then give up loudly
        # (the prompts stay in_flight in the DB and are recovered at the next start).
        delay = 0.1
        for attempt in range(1, self._attempts + 1):
            try:
                await self._write(batch)
                return
            except Exception as exc:
                if attempt == self._attempts:
                    raise
                log.warning("recording %d outcomes failed (attempt %d): %r; retrying",
                            len(batch), attempt, exc)
                await anyio.sleep(delay)
                delay = min(delay * 4, 5.0)

    def _release(self, all_: bool = False) -> None:
        keep = []
        for target, event in self._waiters:
            if all_ or self._committed_total >= target:
                event.set()
            else:
                keep.append((target, event))
        self._waiters = keep

    async def close(self) -> None:
        """Commit what is queued, then stop the loop."""
        self._closing = True
        self._wake.set()
        with anyio.CancelScope(shield=True):
            await self._stopped.wait()
