"""The exact tokens of answers (`answer_tokens`, schema version 11), and sending truncated
answers back to be continued from them.

Ids are kept as BLOBs of little-endian uint32, 4 bytes a token (JSON text would be about
twice that, and parsed on every read): a 4,096-token answer is 16 KB beside its ~12 KB of
text. One row per prompt, replaced only when an answer of that prompt is recorded, so a
continuation that is retried, requeued by a server's death or cut off by a SIGKILL starts
again from the same stored ids: nothing is continued twice, nothing from a half-done part.

Continuing a truncated answer (`continue_truncated`): its row is marked `continuing` and the
prompt goes back to pending in the same transaction; the claim gives such prompts out
before fresh ones (prompts_table.claim) with what they continue from (`StoredAnswer`). A
truncated answer with no stored ids (recorded before ids were kept, by a server that sent
none, an error abort) is sent back too, to be re-run from the start, and counted apart.
"""

from __future__ import annotations

import sqlite3
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from state.connection import StoreConnection
from state.records import DONE, PENDING, StoredAnswer, TokenIds

_LITTLE = sys.byteorder == "little"


def pack_ids(ids: Iterable[int]) -> bytes:
    """Token ids as 4 bytes each, little-endian whatever the machine."""
    a = array("I", ids)
    if not _LITTLE:
        a.byteswap()
    return a.tobytes()


def unpack_ids(blob: bytes) -> tuple[int, ...]:
    if len(blob) % 4:
        raise ValueError(f"stored token ids are {len(blob)} bytes, not a multiple of 4")
    a = array("I")
    a.frombytes(blob)
    if not _LITTLE:
        a.byteswap()
    return tuple(a)


@dataclass(frozen=True)
class ContinueCounts:
    """What one `continue_truncated` sent back."""
    continued: int               # to be continued from their stored ids
    from_scratch: int            # truncated with no stored ids: re-run from the start
    tokens_kept: int             # output tokens the continued ones will not decode again


@dataclass(frozen=True)
class Continuable:
    """Truncated answers under a limit, as continue would take them now."""
    answers: int                 # with stored ids
    tokens_kept: int             # their output tokens
    without_ids: int             # truncated, no stored ids: would re-run from the start
    longest_prompt: int          # prompt tokens of the longest one with ids (0: none)


_TRUNCATED = ("FROM prompts p INDEXED BY prompts_truncated "
              "WHERE p.status = 'done' AND p.finish_reason = 'length' AND p.max_tokens < ?")
_NO_LOOPS = " AND coalesce(p.loop, 0) = 0"
_HAS_IDS = "EXISTS (SELECT 1 FROM answer_tokens t WHERE t.prompt_id = p.id)"


def write_tokens(conn: sqlite3.Connection, prompt_id: str, ids: TokenIds | None) -> None:
    """Keep (or drop, with None) a recorded answer's ids, in the recording's transaction."""
    if ids is None:
        conn.execute("DELETE FROM answer_tokens WHERE prompt_id = ?", (prompt_id,))
        return
    conn.execute("INSERT OR REPLACE INTO answer_tokens (prompt_id, prompt_ids, output_ids, "
                 "in_reasoning, parts, continuing) VALUES (?, ?, ?, ?, ?, 0)",
                 (prompt_id, pack_ids(ids.prompt_ids), pack_ids(ids.output_ids),
                  int(ids.in_reasoning), ids.parts))


def truncated_to_pending(conn: sqlite3.Connection, below_max_tokens: int,
                         include_loops: bool, at_most: int | None = None) -> int:
    """Done answers cut off under `below_max_tokens` back to pending (loops only when
    `include_loops`; the earliest finished `at_most` only, when given: the count an operator
    was shown); the caller moves status_counts. Shared by a requeue from scratch and a
    continue: which one it is, the marks on answer_tokens say."""
    where = ("WHERE status = 'done' AND finish_reason = 'length' AND max_tokens < ?"
             + ("" if include_loops else " AND coalesce(loop, 0) = 0"))
    if at_most is None:
        return int(conn.execute("UPDATE prompts INDEXED BY prompts_truncated "
                                "SET status = 'pending' " + where, (below_max_tokens,)).rowcount)
    return int(conn.execute(
        "UPDATE prompts SET status = 'pending' WHERE rowid IN (SELECT rowid FROM prompts "
        f"INDEXED BY prompts_truncated {where} ORDER BY finished_at, rowid LIMIT ?)",
        (below_max_tokens, max(0, at_most))).rowcount)


def continue_now(conn: sqlite3.Connection, prompt_id: str) -> None:
    """A just-recorded answer back to pending, to be continued from its ids (marked first:
    the requeue trigger then leaves its tokens out of the waste ledger)."""
    conn.execute("UPDATE answer_tokens SET continuing = 1 WHERE prompt_id = ?", (prompt_id,))
    conn.execute("UPDATE prompts SET status = 'pending' WHERE id = ?", (prompt_id,))


def count_continued(conn: sqlite3.Connection, tokens_reused: int) -> None:
    conn.execute("UPDATE continued_totals SET answers = answers + 1, tokens = tokens + ?",
                 (tokens_reused,))


def stored_answers(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, StoredAnswer]:
    """What the given prompts continue from (claimed as continuations)."""
    out: dict[str, StoredAnswer] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        marks = ",".join("?" * len(chunk))
        for r in conn.execute(
                "SELECT t.prompt_id, t.prompt_ids, t.output_ids, t.in_reasoning, t.parts, "
                "p.prompt_tokens, p.completion_tokens, p.reasoning_tokens, p.max_tokens "
                f"FROM answer_tokens t JOIN prompts p ON p.id = t.prompt_id "
                f"WHERE t.prompt_id IN ({marks})", chunk):
            tokens = TokenIds(unpack_ids(r[1]), unpack_ids(r[2]), bool(r[3]), int(r[4]))
            out[r[0]] = StoredAnswer(tokens, int(r[5] or 0), int(r[6] or 0), int(r[7] or 0),
                                     int(r[8] or 0))
    return out


class TokenIdsTable(StoreConnection):
    """One of the query families Store is composed of."""

    def continue_truncated(self, below_max_tokens: int,
                           include_loops: bool = False) -> ContinueCounts:
        """Done answers cut off at a limit below `below_max_tokens` back to pending: those
        with stored ids to be continued from them (claimed before fresh prompts), the
        others to be re-run from the start. Their lines stay in their shards until the new
        answers replace them. Degenerate loops stay unless `include_loops`."""
        loops = "" if include_loops else _NO_LOOPS
        with self._tx() as conn:
            # Marked first: the requeue trigger (schema _V11) reads the mark and leaves the
            # continued answers' tokens out of the waste ledger.
            kept = conn.execute(
                "UPDATE answer_tokens SET continuing = 1 WHERE prompt_id IN "
                f"(SELECT p.id {_TRUNCATED}{loops}) RETURNING prompt_id",
                (below_max_tokens,)).fetchall()
            tokens = 0
            if kept:
                tokens = int(conn.execute(
                    "SELECT coalesce(sum(p.completion_tokens), 0) FROM prompts p "
                    "JOIN answer_tokens t ON t.prompt_id = p.id WHERE t.continuing = 1 "
                    "AND p.status = 'done'").fetchone()[0])
            n = truncated_to_pending(conn, below_max_tokens, include_loops)
            self._move(conn, DONE, PENDING, n)
        return ContinueCounts(continued=len(kept), from_scratch=n - len(kept),
                              tokens_kept=tokens)

    def continuable(self, below_max_tokens: int, include_loops: bool = False) -> Continuable:
        """What `continue_truncated` would take now (partial-index backed; one primary-key
        probe of answer_tokens per truncated answer)."""
        loops = "" if include_loops else _NO_LOOPS
        row = self._read(
            f"SELECT coalesce(sum({_HAS_IDS}), 0), "
            f"coalesce(sum(CASE WHEN {_HAS_IDS} THEN p.completion_tokens ELSE 0 END), 0), "
            "count(*), "
            f"coalesce(max(CASE WHEN {_HAS_IDS} THEN p.prompt_tokens END), 0) "
            f"{_TRUNCATED}{loops}", (below_max_tokens,))[0]
        return Continuable(answers=int(row[0]), tokens_kept=int(row[1]),
                           without_ids=int(row[2]) - int(row[0]),
                           longest_prompt=int(row[3]))

    def continued_totals(self) -> tuple[int, int]:
        """(continuations finished, output tokens they did not decode again), since the
        job began."""
        row = self._read("SELECT answers, tokens FROM continued_totals")
        return (int(row[0][0]), int(row[0][1])) if row else (0, 0)

    def stored_tokens(self, prompt_id: str) -> TokenIds | None:
        """One prompt's stored ids (audits, tests, the shard line's output_ids)."""
        rows = self._read("SELECT prompt_ids, output_ids, in_reasoning, parts "
                          "FROM answer_tokens WHERE prompt_id = ?", (prompt_id,))
        if not rows:
            return None
        r = rows[0]
        return TokenIds(unpack_ids(r[0]), unpack_ids(r[1]), bool(r[2]), int(r[3]))

    def token_ids_bytes(self) -> tuple[int, int]:
        """(answers with stored ids, bytes of their ids): the DB's cost of keeping them."""
        row = self._read("SELECT count(*), coalesce(sum(length(prompt_ids) + "
                         "length(output_ids)), 0) FROM answer_tokens")[0]
        return int(row[0]), int(row[1])
