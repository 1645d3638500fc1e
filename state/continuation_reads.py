"""What a live status reads of continuing truncated answers on every snapshot: the
continuations finished so far and the tokens they did not decode again (one row), and the
answers marked to be continued, waiting or in flight (a partial index holding only them).
Both stay cheap however long the job runs; what a raise *would* continue reads every
truncated answer (`TokenIdsTable.continuable`) and is read apart, in the background
(supervisor/job/continuable_reader.py)."""

from __future__ import annotations

from dataclasses import dataclass

from state.token_ids_table import TokenIdsTable


@dataclass(frozen=True)
class ContinuationTotals:
    continued_answers: int       # continuations finished since the job began
    continued_tokens: int        # output tokens they started from: not decoded again
    continuing: int              # marked to be continued: pending or in flight now


class ContinuationReads(TokenIdsTable):
    def continuation_totals(self) -> ContinuationTotals:
        answers, tokens = self.continued_totals()
        continuing = self._read("SELECT count(*) FROM answer_tokens "
                                "INDEXED BY answer_tokens_continuing WHERE continuing = 1")
        return ContinuationTotals(answers, tokens, int(continuing[0][0]))
