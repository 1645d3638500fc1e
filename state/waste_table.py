"""The waste ledger: generated tokens thrown away, by cause, beside the tokens kept.

Two tables (schema version 6, state/schema.py): `waste`, one row per throw-away (a request
aborted, retried, cut off by a crash or a stop, a recorded answer requeued, an answer that
loops), and `token_ledger`, the running totals per cause plus the `kept` row, moved by
triggers in the same transaction as the change that causes them, so reading the ledger
costs seven rows however long the job runs.

What the triggers count on their own, from the `prompts` rows (every path that records,
requeues, adopts or restores an answer goes through them, so no caller can forget):
- an answer becomes `done`: its completion tokens are kept, or, when it loops (`loop` 1),
  wasted as `loop` (a degenerate loop is output nobody keeps);
- a `done` answer goes back to pending (requeue truncated, a re-import of changed text):
  its completion tokens are wasted as `requeue`, and leave `kept`;
- a `done` row replaced in place (a shard adopted or restored): `kept` follows the new row.
What the callers record (a `Wasted` handed to `Store.record`, in the same group commit as
the outcome): tokens of requests that never became a recorded answer - retried after an
abort, cut off by a crash, a stop or a stall, a loop aborted while decoding.

Goodput = kept / generated, generated = kept + wasted (TokenLedger below).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from state.connection import StoreConnection
from supervisor.contract.waste_causes import WasteCause

KEPT = "kept"


@dataclass(frozen=True)
class Wasted:
    """Tokens one request generated and nobody keeps. Hand it to `Store.record` with the
    outcome (same transaction). `tokens` are completion tokens as the server counted them;
    `estimated` True when they are a guess (age x decode rate), not the server's count.
    Never for tokens a recorded answer holds: those are counted by the store itself."""
    cause: WasteCause
    tokens: int
    at: float                    # unix seconds
    prompt_id: str | None = None
    server: str | None = None
    estimated: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "cause", WasteCause(self.cause))
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) \
                or self.tokens < 0:
            raise ValueError(f"wasted tokens must be an integer >= 0, got {self.tokens!r}")


@dataclass(frozen=True)
class CauseTotal:
    cause: WasteCause
    requests: int
    tokens: int


@dataclass(frozen=True)
class TokenLedger:
    """The ledger's totals: answers kept and their tokens, and the waste by cause (every
    cause present, zero or not, in WasteCause's order)."""
    kept_answers: int
    kept_tokens: int
    wasted: tuple[CauseTotal, ...]

    @property
    def wasted_tokens(self) -> int:
        return sum(c.tokens for c in self.wasted)

    @property
    def generated_tokens(self) -> int:
        return self.kept_tokens + self.wasted_tokens

    @property
    def goodput(self) -> float | None:
        """kept / generated, 0..1; None before any token was generated."""
        generated = self.generated_tokens
        return None if generated <= 0 else self.kept_tokens / generated

    def tokens_for(self, cause: WasteCause) -> int:
        return next((c.tokens for c in self.wasted if c.cause == cause), 0)


def insert_waste(conn: sqlite3.Connection, w: Wasted) -> None:
    """One row in `waste` (its trigger moves the totals), inside the caller's transaction."""
    conn.execute("INSERT INTO waste (time, cause, prompt_id, server, tokens, estimated) "
                 "VALUES (?, ?, ?, ?, ?, ?)",
                 (w.at, str(w.cause), w.prompt_id, w.server, w.tokens, int(w.estimated)))


class WasteTable(StoreConnection):
    """Reading the ledger (writes go through `Store.record` and the triggers)."""

    def token_ledger(self) -> TokenLedger:
        rows = {r[0]: (int(r[1]), int(r[2])) for r in self._read(
            "SELECT cause, requests, tokens FROM token_ledger")}
        kept = rows.get(KEPT, (0, 0))
        return TokenLedger(
            kept_answers=kept[0], kept_tokens=kept[1],
            wasted=tuple(CauseTotal(c, *rows.get(str(c), (0, 0))) for c in WasteCause))
