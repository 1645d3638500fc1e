"""Every query the daemon runs on `prompts` during a job is an index search, never a scan of
the table or a sort of a growing set: at a million prompts a scan per claim or per shard
makes the job quadratic. The statements are captured as the store really runs them."""

from __future__ import annotations

import sqlite3
import time

from state.records import Retry
from state.store import Store
from tests.fixtures.state_db import done, key_for, rows

# Whole-table reads allowed on purpose: recount (an operator's repair, index-only).
ALLOWED_SCANS = ("GROUP BY status",)
# Scanning a partial index is fine: it holds only the rows the query wants.
PARTIAL_INDEXES = ("prompts_unsharded", "prompts_shard", "prompts_truncated",
                   "prompts_requeued")


def _plans(db_path, statements: list[str]) -> dict[str, list[str]]:
    con = sqlite3.connect(db_path)
    try:
        out = {}
        for sql in statements:
            out[sql] = [row[3] for row in con.execute("EXPLAIN QUERY PLAN " + sql)]
        return out
    finally:
        con.close()


def test_job_queries_on_prompts_are_index_searches(tmp_path):
    store = Store.open(tmp_path / "job.db")
    try:
        store.import_batch(rows(3000))
        seen: list[str] = []
        store._conn.set_trace_callback(seen.append)     # expanded SQL, parameters bound
        now = time.time()
        for _ in range(4):
            claimed = store.claim(300, "gpu0", now)
            store.record([done(p.id, now + i, finish="length" if i % 5 == 0 else "stop")
                          for i, p in enumerate(claimed[:-2])])
            store.record([Retry(claimed[-2].id, "HTTP 503", max_attempts=3)])
            store.assign_shards(500, key_for, flush=False)
            store.unsharded_done()
            store.truncated_count()
            store.truncated_count(200)
            store.counts()
            store.status_figures(200)
        store.requeue_truncated(200)
        store.recover_in_flight()
        store.assign_shards(500, key_for, flush=True)
        for shard in store.shards_to_write():
            store.shard_lines(shard.id)
        store._conn.set_trace_callback(None)
    finally:
        store.close()
    queries = sorted({s for s in seen if "prompts" in s and
                      s.lstrip().upper().startswith(("SELECT", "UPDATE"))})
    assert len(queries) >= 8
    for sql, plan in _plans(tmp_path / "job.db", queries).items():
        if any(a in sql for a in ALLOWED_SCANS):
            continue
        text = " | ".join(plan)
        for step in plan:
            if step.startswith("SCAN prompts"):
                assert any(f"INDEX {ix}" in step for ix in PARTIAL_INDEXES), (sql, text)
        if "shard_id = " not in sql:       # one shard's lines: a sort of shard_size rows
            assert "TEMP B-TREE" not in text, (sql, text)
