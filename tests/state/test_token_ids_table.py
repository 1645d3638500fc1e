"""Exact token ids in the state DB (state/token_ids_table.py): 4 bytes a token, kept with the
answer in its recording's transaction, and truncated answers sent back to be continued from
them, claimed before fresh prompts; on a real SQLite file."""

from __future__ import annotations

import json
import sqlite3

import pytest

from state.records import Completion, Done, Requeue, Retry, TokenIds
from state.schema import migrate
from state.store import Store
from state.token_ids_table import pack_ids, unpack_ids
from tests.fixtures.state_db import rows


def _done(pid: str, *, finish: str = "length", tokens: int = 4, max_tokens: int = 4,
          ids: TokenIds | None = None, loop: bool = False,
          continued_from: int | None = None) -> Done:
    return Done(id=pid, completion=Completion(
                    content="", reasoning_content="thinking", finish_reason=finish,
                    prompt_tokens=3, completion_tokens=tokens, reasoning_tokens=tokens),
                max_tokens=max_tokens, model="m", server="gpu0", started_at=1.0,
                finished_at=2.0, loop=loop, tokens=ids, continued_from=continued_from)


def _ids(n: int, start: int = 100) -> TokenIds:
    return TokenIds((1, 2, 3), tuple(range(start, start + n)), in_reasoning=True)


def _record(store: Store, *outcomes: Done) -> None:
    store.claim(len(outcomes) + 100, "gpu0", 1.0)
    store.record(list(outcomes))


def test_ids_are_four_bytes_each_little_endian_and_read_back_exactly():
    ids = [0, 1, 151_643, 2**32 - 1]
    blob = pack_ids(ids)
    assert len(blob) == 16
    assert blob[:8] == b"\x00\x00\x00\x00\x01\x00\x00\x00"
    assert unpack_ids(blob) == tuple(ids)
    with pytest.raises(ValueError, match="not a multiple of 4"):
        unpack_ids(blob[:-1])


def test_an_answer_keeps_its_ids_and_a_later_answer_without_ids_drops_them(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(2))
        _record(store, _done("p0000", ids=_ids(4)), _done("p0001", finish="stop"))
        assert store.stored_tokens("p0000") == _ids(4)
        assert store.stored_tokens("p0001") is None
        assert store.token_ids_bytes() == (1, 4 * (3 + 4))
        store.requeue_ids(["p0000"])
        _record(store, _done("p0000", finish="stop"))
        assert store.stored_tokens("p0000") is None


def test_continue_marks_truncated_answers_with_ids_and_reruns_the_others(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(5))
        _record(store, _done("p0000", ids=_ids(4)),                 # continued
                _done("p0001"),                                      # no ids: from scratch
                _done("p0002", ids=_ids(4), loop=True),              # a loop: stays
                _done("p0003", ids=_ids(4), finish="stop"),          # not truncated
                _done("p0004", ids=_ids(4), max_tokens=8))           # at the new limit
        assert store.continuable(8).answers == 1
        got = store.continue_truncated(8)
        assert (got.continued, got.from_scratch, got.tokens_kept) == (1, 1, 4)
        counts = store.counts()
        assert (counts.pending, counts.done) == (2, 3)
        # The continued answer's tokens are not thrown away (the requeue trigger skips it);
        # the one re-run from scratch is.
        wasted = dict(store._read("SELECT prompt_id, tokens FROM waste WHERE cause = 'requeue'"))
        assert wasted == {"p0001": 4}


def test_continuations_are_claimed_before_fresh_prompts_with_their_stored_answer(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(6))
        first = store.claim(2, "gpu0", 1.0)
        assert [p.id for p in first] == ["p0000", "p0001"]
        store.record([_done("p0000"), _done("p0001", ids=_ids(4))])
        store.continue_truncated(8)
        got = store.claim(3, "gpu0", 2.0)
        # p0001 (a continuation) first, then fresh prompts in import order; p0000 (no ids)
        # waits behind them (it has an attempt).
        assert [p.id for p in got] == ["p0001", "p0002", "p0003"]
        assert got[0].stored is not None and got[0].stored.ids == _ids(4)
        assert got[0].stored.completion_tokens == 4 and got[0].stored.max_tokens == 4
        assert got[1].stored is None


def test_a_retried_or_requeued_continuation_starts_again_from_the_stored_ids(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(1))
        _record(store, _done("p0000", ids=_ids(4)))
        store.continue_truncated(8)
        for outcome in (Retry("p0000", "stalled", 5), Requeue("p0000")):
            (claimed,) = store.claim(1, "gpu0", 3.0)
            assert claimed.stored is not None and claimed.stored.ids == _ids(4)
            store.record([outcome])
        # A daemon killed with it in flight: recovered to pending, still a continuation.
        store.claim(1, "gpu0", 4.0)
        store.recover_in_flight()
        (claimed,) = store.claim(1, "gpu0", 5.0)
        assert claimed.stored is not None
        stitched = TokenIds((1, 2, 3), tuple(range(100, 108)), in_reasoning=False, parts=2)
        store.record([_done("p0000", finish="stop", tokens=8, max_tokens=8, ids=stitched,
                            continued_from=4)])
        assert store.stored_tokens("p0000") == stitched
        assert store.continued_totals() == (1, 4)
        assert store.claim(1, "gpu0", 6.0) == []
        assert store._read("SELECT continued_from FROM prompts")[0][0] == 4


def test_changed_prompt_text_drops_its_stored_ids(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(1))
        _record(store, _done("p0000", ids=_ids(4)))
        changed = [r.__class__(r.id, [{"role": "user", "content": "new"}], r.source_line)
                   for r in rows(1)]
        assert store.reimport_changed(changed, "operator") == 1
        assert store.stored_tokens("p0000") is None


def test_a_version_10_db_migrates_and_its_truncated_answers_have_no_ids(tmp_path):
    path = tmp_path / "job.db"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, 10)
    conn.execute("INSERT INTO prompts (id, messages, status, finish_reason, max_tokens, "
                 "completion_tokens, prompt_tokens) VALUES "
                 "('old', '[]', 'done', 'length', 4, 4, 3)")
    conn.execute("UPDATE status_counts SET n = 1 WHERE status = 'done'")
    conn.close()
    with Store.open(path) as store:
        c = store.continuable(8)
        assert (c.answers, c.without_ids) == (0, 1)
        got = store.continue_truncated(8)
        assert (got.continued, got.from_scratch) == (0, 1)


def test_shard_lines_carry_continued_from_and_output_ids_only_where_they_apply(tmp_path):
    from supervisor.shards.writer import ShardWriter
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(2))
        _record(store, _done("p0000", ids=_ids(4), continued_from=2),
                _done("p0001", finish="stop"))
        plain = ShardWriter(store, tmp_path / "a", 2, lambda n: f"s{n}.jsonl")
        plain.sync(flush=True)
        lines = [json.loads(x) for x in (tmp_path / "a" / "s1.jsonl").read_text().splitlines()]
        assert lines[0]["continued_from"] == 2 and "output_ids" not in lines[0]
        # A line generated in one go keeps the bytes it always had: no new keys.
        assert list(lines[1]) == ["id", "messages", "finish_reason", "loop", "usage",
                                  "max_tokens", "model", "server", "attempt", "time"]
        with_ids = ShardWriter(store, tmp_path / "b", 2, lambda n: f"s{n}.jsonl",
                               output_ids=True)
        store.reassign_shard(1, "test", "test")
        with_ids.sync(flush=True)
        lines = [json.loads(x) for x in (tmp_path / "b" / "s1.jsonl").read_text().splitlines()]
        assert lines[0]["output_ids"] == [100, 101, 102, 103]
        assert "output_ids" not in lines[1]             # no ids kept for it
