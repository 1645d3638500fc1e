"""The store on real SQLite files: every state transition, its guards, and the counts."""

from __future__ import annotations

import sqlite3

import pytest

from state.records import Failed, Requeue, Retry, StatusCounts
from state.schema import SCHEMA_VERSION, SchemaError
from state.settings_keys import Setting
from state.store import Store
from tests.fixtures.state_db import done, key_for, rows


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "job.db")
    yield s
    s.close()


def test_open_creates_schema_in_wal_and_reopens_idempotently(tmp_path):
    path = tmp_path / "job.db"
    Store.open(path).close()
    with Store.open(path) as s:
        assert s.counts() == StatusCounts()
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()
    assert {"prompts", "shards", "events", "settings", "server_processes"} <= tables


def test_a_db_from_a_newer_version_is_refused(tmp_path):
    path = tmp_path / "job.db"
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.close()
    with pytest.raises(SchemaError, match="newer"):
        Store.open(path)


def test_import_counts_duplicates_and_is_idempotent(store):
    assert store.import_batch(rows(10)) == (10, 0)
    assert store.import_batch(rows(12)) == (2, 10)
    assert store.import_batch(rows(12)) == (0, 12)
    assert store.counts() == StatusCounts(pending=12)
    assert store.counts().total == 12


def test_claim_in_import_order_then_nothing(store):
    store.import_batch(list(reversed(rows(5))))        # import order != id order
    got = store.claim(3, "gpu0", 1.0)
    assert [c.id for c in got] == ["p0004", "p0003", "p0002"]
    assert got[0].messages == [{"role": "user", "content": "question 4"}]
    assert got[0].attempts == 0
    assert [c.id for c in store.claim(10, "gpu1", 2.0)] == ["p0001", "p0000"]
    assert store.claim(10, "gpu1", 3.0) == []
    assert store.counts() == StatusCounts(in_flight=5)


def test_a_retried_prompt_waits_behind_the_untried_ones(store):
    """Fewest attempts first: an error's retry is not claimed again at once, so a systemic
    error meets many prompts (and the breaker's window fills) before any spends its attempts."""
    store.import_batch(rows(4))
    [first] = store.claim(1, "gpu0", 1.0)
    store.record([Retry(first.id, "HTTP 400: bad template", 3)])
    assert [c.id for c in store.claim(2, "gpu0", 2.0)] == ["p0001", "p0002"]
    store.record([Requeue("p0001")])                    # back with no attempt counted
    assert [c.id for c in store.claim(3, "gpu0", 3.0)] == ["p0001", "p0003", "p0000"]
    assert store.claim(1, "gpu0", 4.0) == []


def test_outcomes_move_prompts_and_counts(store):
    store.import_batch(rows(5))
    ids = [c.id for c in store.claim(5, "gpu0", 1.0)]
    store.record([done(ids[0], 2.0), Retry(ids[1], "timeout", 3), Retry(ids[2], "5xx", 1),
                  Failed(ids[3], "HTTP 400: too long"), Requeue(ids[4])])
    assert store.prompt_status(ids[0]) == ("done", 1, None)
    assert store.prompt_status(ids[1]) == ("pending", 1, "timeout")
    assert store.prompt_status(ids[2]) == ("failed", 1, "5xx")
    assert store.prompt_status(ids[3]) == ("failed", 1, "HTTP 400: too long")
    assert store.prompt_status(ids[4]) == ("pending", 0, None)
    assert store.counts() == StatusCounts(pending=2, done=1, failed=2)
    assert store.recount() == store.counts()
    assert store.failed_prompts() == [(ids[2], 1, "5xx"), (ids[3], 1, "HTTP 400: too long")]


def test_late_outcomes_for_prompts_not_in_flight_are_ignored(store):
    store.import_batch(rows(2))
    a, b = (c.id for c in store.claim(2, "gpu0", 1.0))
    store.record([Requeue(a), done(b, 2.0)])
    # The server's late answer for a, and a duplicate for b: neither changes anything.
    store.record([done(a, 3.0), Retry(b, "late", 5), Failed(b, "late"), Requeue(b)])
    assert store.prompt_status(a) == ("pending", 0, None)
    assert store.prompt_status(b) == ("done", 1, None)
    assert store.counts() == StatusCounts(pending=1, done=1)


def test_retry_counts_attempts_up_to_the_limit(store):
    store.import_batch(rows(1))
    for attempt in range(1, 4):
        [c] = store.claim(1, "gpu0", float(attempt))
        assert c.attempts == attempt - 1
        store.record([Retry(c.id, f"error {attempt}", 3)])
    assert store.prompt_status("p0000") == ("failed", 3, "error 3")
    assert store.claim(1, "gpu0", 9.0) == []


def test_recover_in_flight_does_not_count_an_attempt(store):
    store.import_batch(rows(4))
    store.claim(3, "gpu0", 1.0)
    assert store.recover_in_flight() == 3
    assert store.counts() == StatusCounts(pending=4)
    assert {c.attempts for c in store.claim(4, "gpu0", 2.0)} == {0}


def test_requeue_truncated_keeps_result_and_shard_until_replaced(store):
    store.import_batch(rows(3))
    ids = [c.id for c in store.claim(3, "gpu0", 1.0)]
    store.record([done(ids[0], 2.0, finish="length", max_tokens=100),
                  done(ids[1], 2.1, finish="length", max_tokens=500),
                  done(ids[2], 2.2)])
    assert store.assign_shards(10, key_for, flush=True) == [1]
    store.mark_shard_written(1, 3, 30, "s", "m", 3.0)
    assert store.truncated_count() == 2 and store.truncated_count(200) == 1
    assert store.requeue_truncated(200) == 1
    assert store.counts() == StatusCounts(pending=1, done=2)
    assert [l.completion.content for l in store.shard_lines(1)][0] == f"answer to {ids[0]}"
    assert store.shards_to_write() == []              # nothing changed in the shard yet
    [c] = store.claim(5, "gpu0", 4.0)
    assert c.id == ids[0] and c.attempts == 1
    store.record([done(ids[0], 5.0, max_tokens=200, content="longer answer")])
    [again] = store.shards_to_write()
    assert again.id == 1 and again.version == 2
    line = store.shard_lines(1)[0]
    assert (line.completion.content, line.max_tokens, line.attempts) == ("longer answer", 200, 2)
    assert store.requeue_truncated(200) == 0


def test_assign_shards_in_finish_order_whole_shards_until_flush(store):
    store.import_batch(rows(7))
    ids = [c.id for c in store.claim(7, "gpu0", 1.0)]
    # Finish order is the reverse of import order.
    store.record([done(pid, 100.0 - i) for i, pid in enumerate(ids)])
    assert store.assign_shards(3, key_for, flush=False) == [1, 2]
    assert store.unsharded_done() == 1
    assert [l.id for l in store.shard_lines(1)] == sorted(ids[4:7])   # by id in the file
    assert store.assign_shards(3, key_for, flush=False) == []
    assert store.assign_shards(3, key_for, flush=True) == [3]
    assert [l.id for l in store.shard_lines(3)] == [ids[0]]
    assert [(s.id, s.key, s.records, s.status) for s in store.shards_to_write()] == [
        (1, "shard-000001.jsonl", 3, "assigned"), (2, "shard-000002.jsonl", 3, "assigned"),
        (3, "shard-000003.jsonl", 1, "assigned")]


def test_written_then_uploaded_with_guards(store):
    store.import_batch(rows(2))
    ids = [c.id for c in store.claim(2, "gpu0", 1.0)]
    store.record([done(i, 2.0) for i in ids])
    store.assign_shards(2, key_for, flush=False)
    [shard] = store.shards_to_write()
    assert store.mark_shard_written(1, 2, 123, "sha-a", "md5-a", 3.0, version=shard.version)
    assert store.upload_backlog() == (1, 123)
    assert store.upload_totals() == ((1, 123), (0, 0))
    # An uploader that uploaded other bytes than the DB's current ones cannot mark it.
    assert not store.mark_shard_uploaded(1, "etag", "ck", 4.0, sha256="stale")
    store.note_upload_failure(1, "connection reset")
    assert store.shard(1).upload_attempts == 1 and store.shard(1).last_error == "connection reset"
    assert store.mark_shard_uploaded(1, "etag", "ck", 4.0, sha256="sha-a")
    assert store.shard(1).last_error is None
    assert store.upload_backlog() == (0, 0) and store.uploaded_totals() == (1, 123)
    assert store.upload_totals() == ((0, 0), (1, 123))
    assert not store.mark_shard_uploaded(1, "etag", "ck", 5.0)     # only from 'written'


def test_mark_written_with_a_stale_version_leaves_the_shard_assigned(store):
    store.import_batch(rows(1))
    [c] = store.claim(1, "gpu0", 1.0)
    store.record([done(c.id, 2.0, finish="length", max_tokens=10)])
    store.assign_shards(1, key_for, flush=False)
    [old] = store.shards_to_write()
    store.mark_shard_written(1, 1, 10, "a", "a", 3.0)
    store.requeue_truncated(20)
    store.claim(1, "gpu0", 4.0)
    store.record([done(c.id, 5.0, max_tokens=20)])       # shard reassigned, version 2
    assert not store.mark_shard_written(1, 1, 10, "b", "b", 6.0, version=old.version)
    assert [s.version for s in store.shards_to_write()] == [2]


def test_settings(store):
    assert store.get_setting(Setting.MAX_TOKENS) is None
    assert store.get_setting(Setting.MAX_TOKENS, "4096") == "4096"
    store.set_setting(Setting.MAX_TOKENS, "8192")
    store.set_setting(Setting.MAX_TOKENS, "6000")
    assert store.get_setting(Setting.MAX_TOKENS) == "6000"


def test_events_latest_first_selected_oldest_first_returned(store):
    for i in range(5):
        store.add_event("server_state" if i % 2 else "paused", f"gpu{i}", {"i": i, "why": "é"},
                        "supervisor", float(i))
    assert [e.detail["i"] for e in store.recent_events(3)] == [2, 3, 4]
    got = store.recent_events(10, kind="server_state")
    assert [(e.subject, e.time, e.actor) for e in got] == [("gpu1", 1.0, "supervisor"),
                                                           ("gpu3", 3.0, "supervisor")]
    assert got[0].detail == {"i": 1, "why": "é"}


def test_server_processes(store):
    store.record_server_process("gpu0", 100, 100, ["python", "-m", "x"], 1.0)
    store.record_server_process("gpu1", 200, 200, ["python"], 2.0)
    store.record_server_process("gpu0", 300, 300, ["python", "-m", "y"], 3.0)   # restarted
    got = store.server_processes()
    assert [(p.name, p.pid, p.pgid, p.argv, p.started_at) for p in got] == [
        ("gpu0", 300, 300, ["python", "-m", "y"], 3.0), ("gpu1", 200, 200, ["python"], 2.0)]
    store.forget_server_process("gpu0")
    assert [p.name for p in store.server_processes()] == ["gpu1"]


def test_requeue_ids(store):
    store.import_batch(rows(3))
    a, b, c = (x.id for x in store.claim(3, "gpu0", 1.0))
    store.record([done(a, 2.0), Failed(b, "400")])
    assert store.requeue_ids([a, b, c, "nope"]) == 2       # c is in flight: untouched
    assert store.counts() == StatusCounts(pending=2, in_flight=1)


def test_a_reader_sees_committed_state_beside_the_writer(tmp_path, store):
    store.import_batch(rows(3))
    store.claim(1, "gpu0", 1.0)
    with Store.open(tmp_path / "job.db") as reader:
        assert reader.counts() == StatusCounts(pending=2, in_flight=1)
