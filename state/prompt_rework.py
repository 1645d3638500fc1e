"""Sending prompts back to work on an operator's word: failed prompts after a config fix,
and prompts whose text changed in the prompts file since they were imported.

Both are audited: one event per action with who asked, what matched and how many moved, so
the DB still says why a prompt ran twice. A prompt that already sits in a shard keeps its
line there until its new result lands and rewrites that shard (the output never holds two
versions of one prompt, and never loses a line meanwhile).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from state.connection import StoreConnection, dumps
from state.records import FAILED, PENDING, ImportRow
from supervisor.contract.event_kinds import EventKind


class PromptRework(StoreConnection):
    """One of the query families Store is composed of."""

    def requeue_failed(self, reason_like: str | None, actor: str = "operator",
                       caller: dict[str, Any] | None = None) -> int:
        """Failed prompts (those whose error contains `reason_like`, when given) back to
        pending with their attempts set to 0, so a fixed config gives each its full
        `max_attempts` again; the attempts they used are kept in the event. Returns how many."""
        where = "status = 'failed'"
        args: list[Any] = []
        if reason_like:
            # instr, not LIKE: the operator's text is matched literally (% and _ included).
            where += " AND instr(coalesce(error, ''), ?) > 0"
            args.append(reason_like)
        with self._tx() as conn:
            rows = conn.execute(f"SELECT id, attempts FROM prompts WHERE {where} ORDER BY rowid",
                                args).fetchall()
            conn.execute(f"UPDATE prompts SET status = 'pending', attempts = 0 WHERE {where}",
                         args)
            self._move(conn, FAILED, PENDING, len(rows))
            detail = {"count": len(rows), "reason_like": reason_like,
                      "first_ids": [r[0] for r in rows[:20]],
                      "attempts_used": sum(int(r[1]) for r in rows), **(caller or {})}
            conn.execute("INSERT INTO events (time, kind, subject, detail, actor) "
                         "VALUES (?, ?, 'prompts', ?, ?)",
                         (time.time(), EventKind.REQUEUE_FAILED, dumps(detail), actor))
        return len(rows)

    def changed_prompts(self, rows: Sequence[ImportRow]) -> list[ImportRow]:
        """The rows whose id is already in the DB with other messages."""
        if not rows:
            return []
        by_id = {r.id: r for r in rows}
        changed: list[ImportRow] = []
        ids = list(by_id)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for pid, stored in self._read(
                    f"SELECT id, messages FROM prompts WHERE id IN ({marks})", chunk):
                row = by_id[pid]
                if stored != dumps(row.messages):
                    changed.append(row)
        return changed

    def reimport_changed(self, rows: Sequence[ImportRow], actor: str) -> int:
        """Take the new text of already-imported prompts as new work: messages replaced,
        pending again (a prompt in flight right now is left for the next import)."""
        if not rows:
            return 0
        moved = {"done": 0, "failed": 0, "pending": 0}
        with self._tx() as conn:
            for r in rows:
                got = conn.execute(
                    "SELECT status FROM prompts WHERE id = ? AND status != 'in_flight'",
                    (r.id,)).fetchone()
                if got is None:
                    continue
                conn.execute("UPDATE prompts SET messages = ?, source_line = ?, "
                             "status = 'pending', attempts = 0, error = NULL WHERE id = ?",
                             (dumps(r.messages), r.source_line, r.id))
                # New text: the old answer's tokens continue nothing of it.
                conn.execute("DELETE FROM answer_tokens WHERE prompt_id = ?", (r.id,))
                moved[got[0]] += 1
            for src in ("done", "failed"):
                self._move(conn, src, PENDING, moved[src])
            n = sum(moved.values())
            conn.execute("INSERT INTO events (time, kind, subject, detail, actor) "
                         "VALUES (?, ?, 'prompts', ?, ?)",
                         (time.time(), EventKind.REIMPORT_CHANGED,
                          dumps({"count": n, "was_done": moved["done"],
                                 "was_failed": moved["failed"],
                                 "first_ids": [r.id for r in rows[:20]]}),
                          actor))
        return n
