"""The job's shard task: cut and write shards as results arrive, and the last one at the end.

`ShardWriter.sync` runs in a worker thread (writing and fsyncing 500 completions takes real
time) and never two at once: the periodic loop and the final sync share one limiter.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from supervisor.shards.writer import ShardWriter

SYNC_INTERVAL_S = 1.0


class ShardLoop:
    def __init__(self, writer: ShardWriter, on_written: Callable[[], None] | None = None,
                 interval_s: float = SYNC_INTERVAL_S) -> None:
        self.writer = writer
        self.on_written = on_written      # e.g. the uploader's poke: a new shard is waiting
        self.interval_s = interval_s
        self._limiter = anyio.CapacityLimiter(1)

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.interval_s)
            written = await self.sync(False)
            if written and self.on_written is not None:
                self.on_written()

    async def sync(self, flush: bool) -> list[int]:
        """One sync off the event loop; `flush` also cuts the last, partial shard."""
        return await anyio.to_thread.run_sync(self.writer.sync, flush, limiter=self._limiter)
