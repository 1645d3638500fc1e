"""What a live status reads from the DB, in one call: the counts, the ETA's requeued floors,
the truncated answers, the waste ledger and the continuations' totals.

One call rather than five because the daemon's store serves its calls one at a time: each
call of a status snapshot waited its turn behind the dispatcher's claims and group commits,
so a snapshot on a busy job waited five turns (`state/async_store.py`). Every read here is
a small table or a partial index that does not grow with the done answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from state.continuation_reads import ContinuationReads, ContinuationTotals
from state.prompts_table import PromptsTable
from state.records import StatusCounts
from state.waste_table import TokenLedger, WasteTable


@dataclass(frozen=True)
class StatusFigures:
    counts: StatusCounts
    pending_floors: dict[int, int]      # the ETA's: {max_tokens: pending prompts cut off there}
    requeueable_truncated: int          # what "requeue truncated" would re-run now
    truncated: int                      # ... and after max tokens is raised past every limit
    ledger: TokenLedger
    continuation: ContinuationTotals


class StatusReads(PromptsTable, WasteTable, ContinuationReads):
    def status_figures(self, max_tokens: int) -> StatusFigures:
        """The figures for a status at the live `max_tokens` (truncated answers below it are
        what a requeue would re-run; loops are left out, as the requeue leaves them)."""
        return StatusFigures(
            counts=self.counts(), pending_floors=self.pending_floors(),
            requeueable_truncated=self.truncated_count(max_tokens, False),
            truncated=self.truncated_count(None, False), ledger=self.token_ledger(),
            continuation=self.continuation_totals())
