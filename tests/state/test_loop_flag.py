"""The `loop` flag in the state DB: recorded with each answer, kept out of "requeue
truncated" unless asked, split out in the truncation figures, and NULL for rows recorded
before the schema had it."""

from __future__ import annotations

import sqlite3

from state.records import StatusCounts
from state.schema import migrate
from state.store import Store
from tests.fixtures.state_db import done, key_for, rows


def _three_truncated(store: Store) -> list[str]:
    store.import_batch(rows(4))
    ids = [c.id for c in store.claim(4, "gpu0", 1.0)]
    store.record([done(ids[0], 2.0, finish="length", max_tokens=100),
                  done(ids[1], 2.1, finish="length", max_tokens=100, loop=True),
                  done(ids[2], 2.2, finish="length", max_tokens=100, loop=True),
                  done(ids[3], 2.3)])
    return ids


def test_requeue_truncated_skips_loops_unless_asked(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        ids = _three_truncated(store)
        assert store.truncated_split() == (1, 2)
        assert store.truncated_count(200) == 3
        assert store.truncated_count(200, include_loops=False) == 1
        assert store.requeue_truncated(200) == 1
        assert store.counts() == StatusCounts(pending=1, done=3)
        [c] = store.claim(5, "gpu0", 3.0)
        assert c.id == ids[0]
        store.record([done(ids[0], 4.0, max_tokens=200)])
        assert store.requeue_truncated(200) == 0
        assert store.requeue_truncated(200, include_loops=True) == 2
        assert store.pending_floors() == {100: 2}


def test_loop_goes_into_the_shard_line_and_the_audit_view(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        ids = _three_truncated(store)
        assert store.assign_shards(10, key_for, flush=True) == [1]
        assert [line.loop for line in store.shard_lines(1)] == [False, True, True, False]
    con = sqlite3.connect(tmp_path / "job.db")
    row = con.execute("SELECT max_tokens, done, truncated, long, looping FROM audit_truncation "
                      "WHERE max_tokens = 100").fetchone()
    con.close()
    assert row == (100, 4, 3, 1, 2) and ids


def test_rows_from_before_the_loop_column_read_as_unknown(tmp_path):
    path = tmp_path / "old.db"
    con = sqlite3.connect(path, isolation_level=None)
    migrate(con, target=2)                            # the last version without `loop`
    con.execute("INSERT INTO prompts (id, messages, status, finish_reason, max_tokens, "
                "content, completion_tokens, shard_id) "
                "VALUES ('old', '[]', 'done', 'length', 100, 'x', 100, NULL)")
    con.execute("UPDATE status_counts SET n = 1 WHERE status = 'done'")
    con.close()
    with Store.open(path) as store:                   # migrates to the current version
        assert store.truncated_split() == (1, 0)
        assert store.assign_shards(10, key_for, flush=True) == [1]
        assert store.shard_lines(1)[0].loop is None
        # Unknown is not a loop: a requeue re-runs it.
        assert store.requeue_truncated(200) == 1
