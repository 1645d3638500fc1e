"""What a raise of max tokens would continue now (the truncated answers with stored tokens,
the tokens they hold, those without), read for the status in the background.

Why apart from the snapshot's one store call: the count reads every truncated answer's row
(its loop flag and token count sit after ~12 KB of answer in overflow pages) and probes its
stored ids, about 25 us an answer: ~0.7 s at 30K truncated answers, seconds at the seed
job's 162K. In the store's queue that would hold up every claim and record behind it; on a
query-only connection of its own in a worker thread it holds up nobody (WAL: readers never
block the writer). The snapshot takes the latest figures, at most `refresh_s` old; a change
in the truncated answers or in those marked to continue (a raise, a continuation finished)
asks for a new read at once, but never sooner than `gap_factor` times the last read took
after it: the reader keeps under a tenth of one core however large the job grows.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

import anyio
import sqlite_utils

from state.store import Store
from state.token_ids_table import Continuable

log = logging.getLogger(__name__)

# Every limit: what a raise past all of them would take (a limit is a positive int32).
EVERY_LIMIT = 2**31 - 1


class ContinuableReader:
    def __init__(self, path: Path, refresh_s: float = 30.0, gap_factor: float = 9.0) -> None:
        self.path = path
        self.refresh_s = refresh_s
        self.gap_factor = gap_factor
        self.latest: Continuable | None = None
        self._wanted = anyio.Event()

    def want_fresh(self) -> None:
        """The figures changed (answers marked to continue, or some finished): read again."""
        self._wanted.set()

    async def run(self) -> None:
        """Until cancelled: a read, then a wait for `refresh_s` or a wish for a fresh one."""
        while True:
            started = time.monotonic()
            try:
                self.latest = await anyio.to_thread.run_sync(self._read)
            except sqlite3.Error as exc:
                # Said once a refresh at most, however often the figures change meanwhile.
                log.warning("continuable answers not read: %s", exc)
                await anyio.sleep(self.refresh_s)
                continue
            took = time.monotonic() - started
            await anyio.sleep(took * self.gap_factor)
            with anyio.move_on_after(max(0.0, self.refresh_s - took * (1 + self.gap_factor))):
                await self._wanted.wait()
            self._wanted = anyio.Event()

    def _read(self) -> Continuable:
        # Opened as the daemon's own store is (read-write file, WAL), then made query-only:
        # a `mode=ro` connection (Store.open_readonly) failed every read with "disk I/O
        # error" once a second writer's close had removed the daemon's WAL under it (a test
        # that wrote the live DB by hand); this one read on through the same test.
        conn = sqlite3.connect(self.path.absolute().as_uri() + "?mode=rw", uri=True,
                               check_same_thread=False, isolation_level=None, timeout=30.0)
        try:
            conn.execute("PRAGMA query_only = ON")
            return Store(sqlite_utils.Database(conn), self.path).continuable(EVERY_LIMIT)
        finally:
            conn.close()
