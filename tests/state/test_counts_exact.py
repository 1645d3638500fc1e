"""The counters `status` reads instead of counting the prompts table (status_counts and
truncation_counts) stay exact through every path that changes a prompt's state: each step
below is compared with a recount from the rows themselves."""

from __future__ import annotations

import random
import sqlite3

import pytest

from state.records import (
    STATUSES,
    Completion,
    Failed,
    ImportRow,
    Requeue,
    Retry,
    ShardLine,
    StatusCounts,
    TruncationCounts,
)
from state.schema import SCHEMA_VERSION, migrate
from state.shard_adoption import UploadedShard, adopt_shard
from state.shard_audit import RestoredLine
from state.store import Store
from tests.fixtures.state_db import done, key_for, rows

BLANK = (" \t\n\r")


def recounted(store: Store) -> tuple[StatusCounts, TruncationCounts]:
    """From the rows, in Python: no SQL of the store's own, so a shared mistake cannot hide."""
    got = store._read("SELECT status, finish_reason, loop, content, reasoning_content "
                      "FROM prompts")
    by_status = {s: 0 for s in STATUSES}
    long = looping = thinking = 0
    for status, finish, loop, content, reasoning in got:
        by_status[status] += 1
        if status == "done" and finish == "length":
            if loop == 1:
                looping += 1
            else:
                long += 1
            if not (content or "").strip(BLANK) and (reasoning or "").strip(BLANK):
                thinking += 1
    return StatusCounts(**by_status), TruncationCounts(long, looping, thinking)


def assert_exact(store: Store, step: str) -> None:
    counts, truncation = recounted(store)
    assert store.counts() == counts, step
    assert store.truncation_counts() == truncation, step


def outcome(pid: str, kind: str, t: float) -> object:
    if kind == "stop":
        return done(pid, t)
    if kind == "long":
        return done(pid, t, finish="length", max_tokens=100)
    if kind == "loop":
        return done(pid, t, finish="length", max_tokens=100, loop=True)
    if kind == "thinking":
        return done(pid, t, finish="length", max_tokens=100, content=" \n")
    if kind == "retry":
        return Retry(pid, "HTTP 503", max_attempts=2)
    if kind == "failed":
        return Failed(pid, "The input (9000 tokens) is longer than the model's context length")
    return Requeue(pid)


KINDS = ("stop", "long", "loop", "thinking", "retry", "failed", "requeue")


def test_every_path_keeps_the_counts_exact(tmp_path):
    rng = random.Random(33)
    with Store.open(tmp_path / "job.db") as store:
        assert_exact(store, "empty")
        store.import_batch(rows(60))
        store.import_batch(rows(70))                       # 60 duplicates, 10 new
        assert_exact(store, "import")
        t = 10.0
        for round_ in range(4):
            claimed = [c.id for c in store.claim(25, "gpu0", t)]
            assert_exact(store, f"claim {round_}")
            store.record([outcome(pid, rng.choice(KINDS), t) for pid in claimed])
            t += 1
            assert_exact(store, f"record {round_}")
        left = len(store.claim(5, "gpu1", t))
        assert store.recover_in_flight() == left > 0
        assert_exact(store, "recover_in_flight")

        # A sharded answer regenerated: its shard is rewritten, the counts follow the rows.
        store.assign_shards(10, key_for, flush=True)
        store.requeue_truncated(below_max_tokens=200)
        assert_exact(store, "requeue_truncated without loops")
        claimed = [c.id for c in store.claim(200, "gpu0", t)]
        store.record([outcome(pid, "thinking" if i % 2 else "stop", t)
                      for i, pid in enumerate(claimed)])
        assert_exact(store, "regenerated")
        store.requeue_truncated(below_max_tokens=200, include_loops=True)
        assert_exact(store, "requeue_truncated with loops")

        claimed = [c.id for c in store.claim(200, "gpu0", t)]
        store.record([outcome(pid, rng.choice(KINDS[:6]), t) for pid in claimed])
        assert_exact(store, "record again")
        some = store._read("SELECT id FROM prompts WHERE status IN ('done', 'failed') "
                           "ORDER BY rowid LIMIT 12")
        store.requeue_ids([r[0] for r in some])
        assert_exact(store, "requeue_ids")
        store.requeue_failed(None, actor="test")
        assert_exact(store, "requeue_failed")

        claimed = [c.id for c in store.claim(200, "gpu0", t)]
        store.record([outcome(pid, rng.choice(KINDS[:4]), t) for pid in claimed])
        changed = [ImportRow(r.id, [{"role": "user", "content": "new text"}], r.source_line)
                   for r in rows(70)[::7]]
        store.reimport_changed(changed, actor="test")
        assert_exact(store, "reimport_changed")

        # Shard adoption (a restored node) and rebuild-state's restore take rows to done
        # with whatever answer the output holds.
        pids = [r[0] for r in store._read("SELECT id FROM prompts WHERE shard_id IS NULL "
                                          "ORDER BY rowid LIMIT 4")]
        lines = [ShardLine(pid, [], Completion("" if i == 0 else "a", "r", "length", 1, 2, 0),
                           100, "m", "gpu0", 1, t, loop=i == 1) for i, pid in enumerate(pids)]
        adopt_shard(store, UploadedShard(900, key_for(900), 1, "0" * 64, "0" * 32, None), lines)
        assert_exact(store, "adopt_shard")
        store.restore_shard(901, key_for(901), [
            RestoredLine("restored-new", [], "", "thinking", "length", 1, 2, 0, 100, "m",
                         "gpu0", 1, t, None),
            RestoredLine(pids[3], [], "a", "r", "stop", 1, 2, 0, 100, "m", "gpu0", 1, t)],
            status="uploaded", size=1, sha256="0" * 64, md5="0" * 32, etag=None, now=t)
        store.recount()          # as rebuild-state does at its end (status_counts only)
        assert_exact(store, "restore_shard + recount")

        # A hand edit in sqlite3: the triggers hold the truncation counts to it too.
        store._conn.execute("UPDATE prompts SET loop = 1 WHERE finish_reason = 'length'")
        store._conn.execute("DELETE FROM prompts WHERE id = 'restored-new'")
        store.recount()
        assert_exact(store, "hand edit")
        assert store.truncation_counts().truncated > 0      # the test saw truncations


@pytest.mark.parametrize("readonly", [False, True], ids=["writer", "reader"])
def test_the_migration_counts_what_an_older_db_holds(tmp_path, readonly):
    """A DB from schema 7 gets its truncation counts from its rows when a writer opens it;
    a reader (which never migrates) counts them from the rows itself."""
    path = tmp_path / "job.db"
    con = sqlite3.connect(path, isolation_level=None)
    migrate(con, 7)
    con.executemany(
        "INSERT INTO prompts (id, messages, status, finish_reason, loop, content, "
        "reasoning_content) VALUES (?, '[]', ?, ?, ?, ?, ?)",
        [("a", "done", "length", 0, "x", "r"), ("b", "done", "length", 1, "", "r"),
         ("c", "done", "length", None, "\n", "r"), ("d", "done", "stop", 0, "x", "r"),
         ("e", "pending", "length", 0, "", "r")])
    con.close()
    store = Store.open_readonly(path) if readonly else Store.open(path)
    with store:
        assert store.truncation_counts() == TruncationCounts(long=2, looping=1, in_thinking=2)
        assert store.schema_version == (7 if readonly else SCHEMA_VERSION)
