"""`audit_truncation` splits truncated answers by where the cut fell: inside the thinking
(content empty, all text in reasoning: no answer at all) or in the answer, for new rows and
for rows recorded before the split existed (schema 5)."""

from __future__ import annotations

import sqlite3

from state.schema import SCHEMA_VERSION, migrate
from state.store import Store
from tests.fixtures.state_db import done, rows

COLUMNS = "max_tokens, done, truncated, long, looping, in_thinking, in_answer"


def _view(path) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute(f"SELECT {COLUMNS} FROM audit_truncation").fetchall()
    finally:
        con.close()


def test_cut_inside_the_thinking_and_in_the_answer_are_counted_apart(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(6))
        ids = [c.id for c in store.claim(6, "gpu0", 1.0)]
        store.record([
            done(ids[0], 2.0, finish="length", content=""),           # inside the thinking
            done(ids[1], 2.1, finish="length", content=" \n\t"),      # blank: still inside
            done(ids[2], 2.2, finish="length", content="", loop=True),  # looping in thinking
            done(ids[3], 2.3, finish="length", content="The answer is"),  # in the answer
            done(ids[4], 2.4),
            done(ids[5], 2.5, content=""),                           # empty, but not cut off
        ])
    assert _view(tmp_path / "job.db") == [(100, 6, 4, 3, 1, 3, 1)]


def test_rows_recorded_before_the_split_are_split_too(tmp_path):
    path = tmp_path / "old.db"
    con = sqlite3.connect(path, isolation_level=None)
    migrate(con, target=4)
    for pid, content, reasoning in (("a", "", "thinking..."), ("b", "partial", "done"),
                                    ("c", "", None)):
        con.execute("INSERT INTO prompts (id, messages, status, finish_reason, max_tokens, "
                    "content, reasoning_content, completion_tokens) "
                    "VALUES (?, '[]', 'done', 'length', 100, ?, ?, 100)",
                    (pid, content, reasoning))
    assert migrate(con, target=5) == [5] and SCHEMA_VERSION >= 5
    con.close()
    # "c" wrote nothing at all: not a cut inside any thinking. (looping: unknown, NULL,
    # for rows from before loops were checked.)
    assert _view(path) == [(100, 3, 3, 3, None, 1, 2)]
