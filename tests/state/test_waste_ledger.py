"""The waste ledger (state/waste_table.py): tokens kept and thrown away by cause, moved in
the same transaction as the answers and requeues that cause them, on a real SQLite file."""

from __future__ import annotations

import sqlite3

import pytest

from state.records import Completion, Done, ImportRow, Retry
from state.schema import migrate, schema_version
from state.store import Store
from state.waste_table import CauseTotal, TokenLedger, Wasted
from supervisor.contract.waste_causes import WasteCause as W
from tests.fixtures.state_db import rows


def _done(pid: str, tokens: int, *, finish: str = "stop", loop: bool = False,
          max_tokens: int = 100) -> Done:
    return Done(id=pid, completion=Completion(
                    content=f"answer to {pid}", reasoning_content="thinking",
                    finish_reason=finish, prompt_tokens=10, completion_tokens=tokens,
                    reasoning_tokens=1),
                max_tokens=max_tokens, model="m", server="gpu0", started_at=1.0,
                finished_at=2.0, loop=loop)


def _kept_by_query(store: Store) -> tuple[int, int]:
    """What `kept` must equal: done answers that are not loops, counted the slow way."""
    n, tokens = store._read("SELECT count(*), coalesce(sum(completion_tokens), 0) FROM prompts "
                            "WHERE status = 'done' AND coalesce(loop, 0) = 0")[0]
    return int(n), int(tokens)


def _waste_rows(store: Store) -> dict[str, tuple[int, int]]:
    return {c: (int(n), int(t)) for c, n, t in store._read(
        "SELECT cause, count(*), sum(tokens) FROM waste GROUP BY cause")}


# -- arithmetic -------------------------------------------------------------------------------

def test_goodput_is_kept_over_kept_plus_wasted():
    ledger = TokenLedger(kept_answers=9, kept_tokens=900, wasted=(
        CauseTotal(W.LOOP, 1, 60), CauseTotal(W.REQUEUE, 2, 40)))
    assert ledger.wasted_tokens == 100
    assert ledger.generated_tokens == 1000
    assert ledger.goodput == pytest.approx(0.9)
    assert ledger.tokens_for(W.LOOP) == 60 and ledger.tokens_for(W.STALL) == 0


def test_goodput_is_unknown_before_any_token_and_zero_when_all_is_waste():
    assert TokenLedger(0, 0, ()).goodput is None
    assert TokenLedger(0, 0, (CauseTotal(W.RETRY, 1, 5),)).goodput == 0.0


@pytest.mark.parametrize("tokens", [-1, 1.5, True, "3"])
def test_a_waste_record_refuses_what_is_not_a_token_count(tokens):
    with pytest.raises(ValueError, match="wasted tokens must be an integer >= 0"):
        Wasted(W.STALL, tokens, at=1.0)


def test_a_waste_record_refuses_an_unknown_cause():
    with pytest.raises(ValueError, match="'boredom' is not a valid WasteCause"):
        Wasted("boredom", 3, at=1.0)   # type: ignore[arg-type]


# -- in the store ------------------------------------------------------------------------------

def test_answers_are_kept_loops_and_callers_waste_counted_by_cause(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        assert store.token_ledger().generated_tokens == 0
        store.import_batch(rows(4))
        ids = [c.id for c in store.claim(4, "gpu0", 1.0)]
        store.record([_done(ids[0], 100), _done(ids[1], 300, finish="length", loop=True),
                      Wasted(W.RETRY, 40, at=2.0, prompt_id=ids[2], server="gpu1"),
                      Retry(ids[2], "aborted", 3),
                      Wasted(W.CRASH, 25, at=2.0, prompt_id=ids[3], server="gpu1",
                             estimated=True)])
        ledger = store.token_ledger()
        assert (ledger.kept_answers, ledger.kept_tokens) == (1, 100) == _kept_by_query(store)
        assert {c.cause: (c.requests, c.tokens) for c in ledger.wasted if c.tokens} == {
            W.LOOP: (1, 300), W.RETRY: (1, 40), W.CRASH: (1, 25)}
        assert ledger.goodput == pytest.approx(100 / 465)
        assert _waste_rows(store) == {"loop": (1, 300), "retry": (1, 40), "crash": (1, 25)}
        assert store._read("SELECT prompt_id, server, estimated FROM waste "
                           "WHERE cause = 'crash'") == [(ids[3], "gpu1", 1)]


def test_requeued_truncated_answers_leave_kept_and_are_wasted_once(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(3))
        ids = [c.id for c in store.claim(3, "gpu0", 1.0)]
        store.record([_done(ids[0], 100, finish="length"), _done(ids[1], 70),
                      _done(ids[2], 100, finish="length", loop=True)])
        assert store.requeue_truncated(200) == 1          # the loop stays
        ledger = store.token_ledger()
        assert (ledger.kept_answers, ledger.kept_tokens) == (1, 70) == _kept_by_query(store)
        assert ledger.tokens_for(W.REQUEUE) == 100 and ledger.tokens_for(W.LOOP) == 100
        # Its new answer replaces it: kept again, the old tokens stay wasted.
        store.claim(1, "gpu0", 3.0)
        store.record([_done(ids[0], 180, max_tokens=200)])
        ledger = store.token_ledger()
        assert (ledger.kept_answers, ledger.kept_tokens) == (2, 250) == _kept_by_query(store)
        assert ledger.tokens_for(W.REQUEUE) == 100
        # A loop requeued on request was already counted as waste: not counted again.
        assert store.requeue_truncated(200, include_loops=True) == 1
        assert store.token_ledger().tokens_for(W.REQUEUE) == 100
        assert store.token_ledger().tokens_for(W.LOOP) == 100
        assert ledger.goodput == pytest.approx(250 / 450)


def test_reimported_answers_are_wasted_and_requeued_failures_waste_nothing(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(2))
        a, b = (c.id for c in store.claim(2, "gpu0", 1.0))
        store.record([_done(a, 50), Retry(b, "HTTP 503", 1)])       # b failed at once
        assert store.requeue_failed(None) == 1
        assert store.token_ledger().wasted_tokens == 0
        changed = ImportRow(a, [{"role": "user", "content": "new text"}], 1)
        assert store.reimport_changed([changed], "operator") == 1
        ledger = store.token_ledger()
        assert ledger.kept_tokens == 0 and ledger.tokens_for(W.REQUEUE) == 50


def test_a_late_answer_for_a_requeued_prompt_moves_nothing(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(1))
        (a,) = (c.id for c in store.claim(1, "gpu0", 1.0))
        store.record([_done(a, 50)])
        store.record([_done(a, 999)])                # not in flight: ignored
        assert store.token_ledger().kept_tokens == 50 == _kept_by_query(store)[1]


# -- migration -----------------------------------------------------------------------------

def test_a_version_5_db_gains_the_ledger_with_its_answers_kept_and_loops_wasted(tmp_path):
    path = tmp_path / "old.db"
    con = sqlite3.connect(path, isolation_level=None)
    migrate(con, target=5)
    for pid, status, tokens, loop in (("a", "done", 100, 0), ("b", "done", 30, None),
                                      ("c", "done", 400, 1), ("d", "pending", 70, 0),
                                      ("e", "failed", None, None)):
        con.execute("INSERT INTO prompts (id, messages, status, completion_tokens, loop, "
                    "server, finished_at) VALUES (?, '[]', ?, ?, ?, 'gpu0', 5.0)",
                    (pid, status, tokens, loop))
    assert migrate(con, target=7) == [6, 7] and schema_version(con) == 7
    con.close()
    with Store.open(path) as store:
        ledger = store.token_ledger()
        assert (ledger.kept_answers, ledger.kept_tokens) == (2, 130)
        assert ledger.tokens_for(W.LOOP) == 400 and ledger.wasted_tokens == 400
        assert store._read("SELECT prompt_id, time FROM waste") == [("c", 5.0)]
        assert store._read("SELECT cause, requests, tokens, pct_of_generated "
                           "FROM audit_waste LIMIT 2") == [("kept", 2, 130, 24.53),
                                                          ("loop", 1, 400, 75.47)]


def test_a_version_13_db_keeps_its_waste_and_takes_the_tuners_probe(tmp_path):
    """Version 14 rebuilds `waste` to widen its CHECK: the rows and totals stay, the trigger
    on it and the triggers on `prompts` that write into it still work."""
    path = tmp_path / "v13.db"
    con = sqlite3.connect(path, isolation_level=None)
    migrate(con, target=13)
    for pid in "acd":
        con.execute("INSERT INTO prompts (id, messages, status) VALUES (?, '[]', 'in_flight')",
                    (pid,))
    for pid, tokens, loop in (("a", 100, 0), ("c", 400, 1)):      # the triggers count these
        con.execute("UPDATE prompts SET status = 'done', completion_tokens = ?, loop = ?, "
                    "server = 'gpu0' WHERE id = ?", (tokens, loop, pid))
    con.execute("INSERT INTO waste (time, cause, prompt_id, server, tokens, estimated) "
                "VALUES (6.0, 'stall', 'd', 'gpu1', 55, 1)")
    before = con.execute("SELECT * FROM waste ORDER BY id").fetchall()
    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
        con.execute("INSERT INTO waste (time, cause, tokens) VALUES (7, 'probe', 1)")
    assert migrate(con) == [14]
    assert con.execute("SELECT * FROM waste ORDER BY id").fetchall() == before
    assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    con.close()
    with Store.open(path) as store:
        store.record([Wasted(W.PROBE, 4096, 8.0, server="gpu2")])
        ledger = store.token_ledger()
        assert ledger.tokens_for(W.PROBE) == 4096 and ledger.tokens_for(W.STALL) == 55
        assert ledger.tokens_for(W.LOOP) == 400 and ledger.kept_tokens == 100
    # The requeue trigger on `prompts` still writes into the rebuilt table.
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("UPDATE prompts SET status = 'pending' WHERE id = 'a'")
    assert con.execute("SELECT tokens FROM token_ledger WHERE cause = 'requeue'").fetchone() \
        == (100,)
    con.close()


def test_the_schema_knows_every_cause_and_refuses_others(tmp_path):
    from state.schema_waste_probe import WASTE_CAUSES_V14
    # A new cause needs a schema version that widens the waste table's CHECK.
    assert tuple(str(c) for c in W) == WASTE_CAUSES_V14
    with Store.open(tmp_path / "job.db") as store:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            with store._tx() as conn:
                conn.execute("INSERT INTO waste (time, cause, tokens) VALUES (1, 'boredom', 1)")
        assert store.token_ledger().wasted_tokens == 0
