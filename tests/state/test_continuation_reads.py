"""What a status reads of continuing truncated answers on every snapshot, on a real SQLite
file: the continuations finished (tokens not decoded again) and the answers marked to be
continued, from one row and a partial index (never the answers' rows); and
`dflash-supervisor status --state DB` saying them without a daemon."""

from __future__ import annotations

import sqlite3

from state.records import Completion, Done, TokenIds
from state.store import Store
from supervisor.commands.offline_status import main, summary_json
from tests.fixtures.state_db import rows


def _done(pid: str, tokens: int, max_tokens: int, *, finish: str = "length",
          continued_from: int | None = None) -> Done:
    ids = TokenIds((1, 2, 3), tuple(range(100, 100 + tokens)), in_reasoning=True)
    return Done(id=pid, completion=Completion(
                    content="", reasoning_content="thinking", finish_reason=finish,
                    prompt_tokens=3, completion_tokens=tokens, reasoning_tokens=tokens),
                max_tokens=max_tokens, model="m", server="gpu0", started_at=1.0,
                finished_at=2.0, tokens=ids if finish == "length" else None,
                continued_from=continued_from)


def _job(store: Store) -> None:
    """Four answers truncated at 4 tokens, kept with their ids, all sent to be continued
    under 8; one of them continued to its end (from its 4 tokens), three still marked."""
    store.import_batch(rows(4))
    claimed = store.claim(4, "gpu0", 1.0)
    store.record([_done(p.id, 4, 4) for p in claimed])
    got = store.continue_truncated(8)
    assert (got.continued, got.from_scratch, got.tokens_kept) == (4, 0, 16)
    first = store.claim(1, "gpu0", 3.0)
    store.record([_done(first[0].id, 6, 8, finish="stop", continued_from=4)])


def test_totals_and_the_marked_count_come_from_the_totals_row_and_the_partial_index(
        tmp_path) -> None:
    with Store.open(tmp_path / "job.db") as store:
        _job(store)
        seen: list[str] = []
        store._conn.set_trace_callback(seen.append)
        totals = store.continuation_totals()
        store._conn.set_trace_callback(None)
    assert (totals.continued_answers, totals.continued_tokens, totals.continuing) == (1, 4, 3)
    con = sqlite3.connect(tmp_path / "job.db")
    try:
        plans = [" | ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + sql))
                 for sql in seen if "answer_tokens" in sql]
    finally:
        con.close()
    assert plans and all("COVERING INDEX answer_tokens_continuing" in p for p in plans), plans


def test_status_without_a_daemon_says_the_continued_tokens_and_the_marked_answers(
        tmp_path, capsys) -> None:
    path = tmp_path / "job.db"
    with Store.open(path) as store:
        _job(store)
    assert main(str(path), events=0) == 0
    out = capsys.readouterr().out
    assert "; 4 not decoded again by continuing 1 truncated answers" in out
    assert ("continue 3 truncated answers marked to be continued from their stored tokens "
            "(the daemon sends them before fresh prompts)") in out
    assert summary_json(str(path))["continued"] == {
        "continued_answers": 1, "continued_tokens": 4, "continuing": 3}
