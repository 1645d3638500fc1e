"""The counts the daemon reads for every live status (truncated answers, requeueable ones, the
ETA's requeued floors) are answered from their partial indexes alone, never from the rows: a
done row carries ~12 KB of answer in overflow pages that SQLite walks to reach the columns
after it, so a count that reads rows costs ~30 us per truncated answer, seconds per status at
900K prompts (benchmarks/README.md, "Seed scale")."""

from __future__ import annotations

import sqlite3
import time

from state.store import Store
from tests.fixtures.state_db import done, rows


def test_live_status_counts_use_covering_indexes(tmp_path):
    store = Store.open(tmp_path / "job.db")
    try:
        store.import_batch(rows(300))
        now = time.time()
        claimed = store.claim(300, "gpu0", now)
        store.record([done(p.id, now + i, finish="length" if i % 3 == 0 else "stop")
                      for i, p in enumerate(claimed)])
        store.requeue_truncated(10_000)
        claimed = store.claim(50, "gpu0", now)
        store.record([done(p.id, now, finish="length") for p in claimed])
        seen: list[str] = []
        store._conn.set_trace_callback(seen.append)
        store.truncated_count()
        store.truncated_count(None, False)
        store.truncated_count(8192, False)
        store.truncated_split()
        store.pending_floors()
        store._conn.set_trace_callback(None)
        assert store.truncated_count() == 50 and sum(store.pending_floors().values()) == 50
    finally:
        store.close()
    con = sqlite3.connect(tmp_path / "job.db")
    try:
        for sql in seen:
            if "FROM truncation_counts" in sql:
                continue        # three rows kept by triggers (schema.py _V8): nothing to cover
            plan = " | ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + sql))
            assert "COVERING INDEX" in plan, (sql, plan)
    finally:
        con.close()
