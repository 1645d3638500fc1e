"""The `prompts` table (with its `status_counts`): import, claim, outcomes, requeues, counts."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import astuple, dataclass

from state.connection import StoreConnection, dumps
from state.crash_points import crash_point
from state.records import (
    DONE,
    FAILED,
    IN_FLIGHT,
    PENDING,
    STATUSES,
    ClaimedPrompt,
    Done,
    Failed,
    ImportRow,
    InFlightClaim,
    Outcome,
    Requeue,
    Retry,
    StatusCounts,
    TruncationCounts,
)
from state.token_ids_table import (
    continue_now,
    count_continued,
    stored_answers,
    truncated_to_pending,
    write_tokens,
)
from state.waste_table import Wasted, insert_waste


@dataclass(frozen=True)
class ImportRefusal:
    """A line of a prompts file refused at import: no prompt was made of it."""
    file: str
    line: int
    prompt_id: str | None
    kind: str
    reason: str
    time: float


class PromptsTable(StoreConnection):
    """Every prompt query; each status change keeps status_counts in step in the same transaction."""

    _last_claim_stamp: float = 0.0     # claim() below: every claim's stamp is distinct

    def import_batch(self, rows: Sequence[ImportRow]) -> tuple[int, int]:
        """Insert new prompts as pending; ids already present are left alone.
        Returns (inserted, duplicates)."""
        if not rows:
            return 0, 0
        with self._tx() as conn:
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO prompts (id, messages, source_line) VALUES (?, ?, ?)",
                [(r.id, dumps(r.messages), r.source_line) for r in rows])
            inserted = conn.total_changes - before
            conn.execute("UPDATE status_counts SET n = n + ? WHERE status = 'pending'",
                         (inserted,))
        return inserted, len(rows) - inserted

    def in_flight_claims(self) -> list[InFlightClaim]:
        """What is in flight now: read at start, before recover_in_flight, so the requests
        a dead daemon left on servers that outlived it can be aborted there by their ids."""
        rows = self._read("SELECT id, attempts, server, started_at FROM prompts "
                          "WHERE status = 'in_flight' ORDER BY rowid")
        return [InFlightClaim(r[0], r[1], r[2], r[3] if r[3] is not None else 0.0)
                for r in rows]

    def recover_in_flight(self) -> int:
        """Every in-flight prompt back to pending (run at start: whoever had them is gone).
        Not an attempt: the prompt did nothing wrong."""
        with self._tx() as conn:
            n = conn.execute("UPDATE prompts SET status = 'pending' WHERE status = 'in_flight'"
                             ).rowcount
            self._move(conn, IN_FLIGHT, PENDING, n)
        return n

    def claim(self, limit: int, server: str, now: float) -> list[ClaimedPrompt]:
        """Up to `limit` pending prompts, now in flight on `server`: the fewest attempts
        first, in import order among equals (a retried prompt waits behind untried ones;
        schema.py's _V7 says why and indexes the order)."""
        if limit <= 0:
            return []
        # Each claim's stamp is distinct, even under a clock that stands still: the stamp is
        # part of the request id (ClaimedPrompt.claimed_at), and a prompt claimed again
        # with the same attempt count must not reuse an id a server may still hold.
        stamp = max(now, self._last_claim_stamp + 1e-6)
        with self._tx() as conn:
            # Continuations first: they are the job's longest answers, and left behind fresh
            # prompts they would be its tail. In the order they were stored (the partial
            # index's own order: no sort of what may be 160K marked answers per claim).
            rows = conn.execute(
                "SELECT p.rowid, p.id, p.messages, p.attempts FROM answer_tokens t "
                "INDEXED BY answer_tokens_continuing JOIN prompts p ON p.id = t.prompt_id "
                "WHERE t.continuing = 1 AND p.status = 'pending' "
                "ORDER BY t.rowid LIMIT ?", (limit,)).fetchall()
            stored = stored_answers(conn, [r[1] for r in rows]) if rows else {}
            if len(rows) < limit:
                taken = {r[0] for r in rows}
                rows += [r for r in conn.execute(
                    "SELECT rowid, id, messages, attempts FROM prompts WHERE status = 'pending' "
                    "ORDER BY attempts, rowid LIMIT ?", (limit,)).fetchall()
                    if r[0] not in taken][:limit - len(rows)]
            if not rows:
                return []
            conn.executemany(
                "UPDATE prompts SET status = 'in_flight', server = ?, started_at = ? "
                "WHERE rowid = ?", [(server, stamp, r[0]) for r in rows])
            self._move(conn, PENDING, IN_FLIGHT, len(rows))
            crash_point("claim.mid_tx")
        self._last_claim_stamp = stamp
        return [ClaimedPrompt(r[1], json.loads(r[2]), r[3], stamp, stored.get(r[1]))
                for r in rows]

    def record(self, outcomes: Sequence[Outcome | Wasted]) -> None:
        """Apply a batch of outcomes in one transaction (group commit). An outcome for a
        prompt that is not in flight is ignored: a late answer after a requeue must not
        overwrite the state the requeue set. A `Wasted` among them is a row of the waste
        ledger (state/waste_table.py), written whatever the prompt's state."""
        if not outcomes:
            return
        with self._tx() as conn:
            for outcome in outcomes:
                self._apply(conn, outcome)
            crash_point("record.mid_tx")

    def _apply(self, conn: sqlite3.Connection, o: Outcome | Wasted) -> None:
        if isinstance(o, Wasted):
            insert_waste(conn, o)
        elif isinstance(o, Done):
            c = o.completion
            got = conn.execute(
                "UPDATE prompts SET status = 'done', attempts = attempts + 1, error = NULL, "
                "content = ?, reasoning_content = ?, finish_reason = ?, prompt_tokens = ?, "
                "completion_tokens = ?, reasoning_tokens = ?, max_tokens = ?, model = ?, "
                "server = ?, started_at = ?, finished_at = ?, loop = ?, continued_from = ? "
                "WHERE id = ? AND status = 'in_flight' RETURNING shard_id",
                (c.content, c.reasoning_content, c.finish_reason, c.prompt_tokens,
                 c.completion_tokens, c.reasoning_tokens, o.max_tokens, o.model, o.server,
                 o.started_at, o.finished_at, int(o.loop), o.continued_from,
                 o.id)).fetchall()
            if got:
                self._move(conn, IN_FLIGHT, DONE, 1)
                write_tokens(conn, o.id, o.tokens)
                if o.continued_from is not None:
                    count_continued(conn, o.continued_from)
                if o.continue_now and o.tokens is not None:
                    continue_now(conn, o.id)
                    self._move(conn, DONE, PENDING, 1)
                shard_id = got[0][0]
                if shard_id is not None:
                    # A regenerated prompt keeps its shard: rewrite it (and re-upload it).
                    conn.execute("UPDATE shards SET status = 'assigned', version = version + 1 "
                                 "WHERE id = ?", (shard_id,))
        elif isinstance(o, Retry):
            got = conn.execute(
                "UPDATE prompts SET attempts = attempts + 1, error = ?, "
                "status = CASE WHEN attempts + 1 >= ? THEN 'failed' ELSE 'pending' END "
                "WHERE id = ? AND status = 'in_flight' RETURNING status",
                (o.error, o.max_attempts, o.id)).fetchall()
            if got:
                self._move(conn, IN_FLIGHT, got[0][0], 1)
        elif isinstance(o, Failed):
            n = conn.execute(
                "UPDATE prompts SET status = 'failed', attempts = attempts + 1, error = ? "
                "WHERE id = ? AND status = 'in_flight'", (o.error, o.id)).rowcount
            self._move(conn, IN_FLIGHT, FAILED, n)
        elif isinstance(o, Requeue):
            n = conn.execute("UPDATE prompts SET status = 'pending' "
                             "WHERE id = ? AND status = 'in_flight'", (o.id,)).rowcount
            self._move(conn, IN_FLIGHT, PENDING, n)
        else:
            raise TypeError(f"not an outcome: {o!r}")

    def requeue_truncated(self, below_max_tokens: int, include_loops: bool = False,
                          at_most: int | None = None) -> int:
        """Done prompts cut off (finish_reason 'length') at a max_tokens below the given one
        go back to pending. Their result and shard stay until the new result replaces them,
        so the output never loses a line meanwhile. Degenerate loops stay unless
        `include_loops`: a looping model loops again, at twice the cost. `at_most`: the
        count an operator was shown; the earliest finished that many go, so answers cut off
        while the operator read the dialog do not make the count a different number."""
        with self._tx() as conn:
            n = truncated_to_pending(conn, below_max_tokens, include_loops, at_most)
            self._move(conn, DONE, PENDING, n)
        return n

    def requeue_ids(self, ids: Sequence[str]) -> int:
        """Put the given done or failed prompts back to pending (an operator's re-run).
        Attempts are kept: they are the audit trail."""
        n_total = 0
        with self._tx() as conn:
            for src in (DONE, FAILED):
                n = 0
                for pid in ids:
                    n += conn.execute("UPDATE prompts SET status = 'pending' "
                                      "WHERE id = ? AND status = ?", (pid, src)).rowcount
                self._move(conn, src, PENDING, n)
                n_total += n
        return n_total

    def counts(self) -> StatusCounts:
        rows = dict(self._read("SELECT status, n FROM status_counts"))
        return StatusCounts(**{s: int(rows.get(s, 0)) for s in STATUSES})

    def recount(self) -> StatusCounts:
        """Rebuild status_counts from the prompts themselves (one index scan). Only needed if
        someone edited `prompts` by hand; the daemon keeps the counts exact on its own."""
        with self._tx() as conn:
            real = dict(conn.execute(
                "SELECT status, count(*) FROM prompts GROUP BY status").fetchall())
            conn.executemany("UPDATE status_counts SET n = ? WHERE status = ?",
                             [(int(real.get(s, 0)), s) for s in STATUSES])
        return self.counts()

    def truncated_count(self, below_max_tokens: int | None = None,
                        include_loops: bool = True) -> int:
        """Done prompts that hit their token limit (those under `below_max_tokens` only,
        when given; without loops, when not `include_loops`: what requeue_truncated would
        re-run). All of them from truncation_counts; under a limit, partial-index backed."""
        if below_max_tokens is None:
            t = self.truncation_counts()
            return t.truncated if include_loops else t.long
        sql = ("SELECT count(*) FROM prompts INDEXED BY prompts_truncated "
               "WHERE status = 'done' AND finish_reason = 'length'")
        if not include_loops:
            sql += " AND coalesce(loop, 0) = 0"
        return int(self._read(sql + " AND max_tokens < ?", (below_max_tokens,))[0][0])

    def truncation_counts(self) -> TruncationCounts:
        """The truncated answers by kind: three rows kept by triggers (schema.py _V8); a
        reader of a DB from before them counts the truncated rows instead."""
        if self.schema_version >= 8:
            rows = dict(self._read("SELECT kind, n FROM truncation_counts"))
            return TruncationCounts(**{k: int(rows.get(k, 0))
                                       for k in ("long", "looping", "in_thinking")})
        return self.truncation_recount()

    def truncation_recount(self) -> TruncationCounts:
        """The truncated answers by kind, counted from the rows (partial-index backed, but
        it reads every truncated row's answer: what truncation_counts spares a reader)."""
        blank = "char(32, 9, 10, 13)"
        row = self._read(
            "SELECT count(*), coalesce(sum(loop IS 1), 0), "
            f"coalesce(sum(trim(coalesce(content, ''), {blank}) = '' "
            f"AND trim(coalesce(reasoning_content, ''), {blank}) <> ''), 0) "
            "FROM prompts INDEXED BY prompts_truncated "
            "WHERE status = 'done' AND finish_reason = 'length'")[0]
        return TruncationCounts(long=int(row[0]) - int(row[1]), looping=int(row[1]),
                                in_thinking=int(row[2]))

    def truncated_split(self) -> tuple[int, int]:
        """(long, looping): done prompts cut off at their limit, merely long or looping."""
        t = self.truncation_counts()
        return t.long, t.looping

    def truncated_in_thinking(self) -> int:
        """Done prompts cut off inside the thinking: content blank, all text in reasoning
        (no answer at all), as audit_truncation's in_thinking counts them."""
        return self.truncation_counts().in_thinking

    def pending_floors(self) -> dict[int, int]:
        """{max_tokens: count} of pending prompts already cut off once at that limit
        (requeued truncated): each is known to run past it. For the ETA."""
        return {int(m): int(n) for m, n in self._read(
            "SELECT max_tokens, count(*) FROM prompts INDEXED BY prompts_requeued "
            "WHERE status = 'pending' AND finish_reason = 'length' GROUP BY max_tokens")}

    def unsharded_done(self) -> int:
        """Done results not yet in a shard (the next shard fills up from these)."""
        return int(self._read("SELECT count(*) FROM prompts INDEXED BY prompts_unsharded "
                              "WHERE status = 'done' AND shard_id IS NULL")[0][0])

    def prompt_status(self, prompt_id: str) -> tuple[str, int, str | None] | None:
        """(status, attempts, error) of one prompt, or None if unknown."""
        rows = self._read("SELECT status, attempts, error FROM prompts WHERE id = ?",
                          (prompt_id,))
        return tuple(rows[0]) if rows else None

    def failed_prompts(self, limit: int = 100) -> list[tuple[str, int, str | None]]:
        """(id, attempts, error) of failed prompts, in import order."""
        return [tuple(r) for r in self._read(
            "SELECT id, attempts, error FROM prompts WHERE status = 'failed' "
            "ORDER BY rowid LIMIT ?", (limit,))]

    # -- lines refused at import (schema 9) ------------------------------------------------

    def clear_import_refusals(self, file: str) -> int:
        """Forget a file's refused lines before it is imported again (its lines may be fixed)."""
        with self._tx() as conn:
            return conn.execute("DELETE FROM import_refusals WHERE file = ?", (file,)).rowcount

    def record_import_refusals(self, refusals: Sequence[ImportRefusal]) -> None:
        if not refusals:
            return
        with self._tx() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO import_refusals (file, line, prompt_id, kind, reason, "
                "time) VALUES (?, ?, ?, ?, ?, ?)", [astuple(r) for r in refusals])

    def import_refusals(self, limit: int = 100) -> list[ImportRefusal]:
        """Refused lines, by file and line."""
        return [ImportRefusal(*r) for r in self._read(
            "SELECT file, line, prompt_id, kind, reason, time FROM import_refusals "
            "ORDER BY file, line LIMIT ?", (limit,))]

    def import_refusal_count(self) -> int:
        return int(self._read("SELECT count(*) FROM import_refusals")[0][0])
