"""What a raise of max tokens can continue: the truncated answers whose exact tokens the
daemon kept, the tokens they hold, and those it must re-run from the start. Part of the status
snapshot (`Status.continuation`); standard library only, like the rest of the contract.

Continuing an answer sends SGLang its prompt ids and its stored output ids and decodes only
what lies past the old limit (issue 38, docs/continuing-truncated-answers.md). The tokens
that saved over the job are the waste ledger's (`Waste.continued_tokens`): they were not
generated twice, so they are neither kept nor wasted again.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.contract.codec import Record


@dataclass(frozen=True)
class Continuation(Record):
    """Truncated answers (not looping: a loop would loop again) by what a raise does with
    them, from the state DB (exact, whole job). Loops are continued only when asked."""
    continuable: int = 0         # their prompt and output ids are stored: continued from them
    tokens_kept: int = 0         # output tokens those answers hold: not decoded again
    without_ids: int = 0         # no stored ids (older rows, an error abort): re-run from scratch
    pending: int = 0             # continuations waiting or in flight now (they go out first)
