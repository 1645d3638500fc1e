"""The control socket's records: what each call takes and answers (the status snapshot
itself lives in status.py). Which path carries which record is said once, in api.py.
Standard library only, like the status records they refer to."""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.contract.codec import Record
from supervisor.contract.status import FlagValue, PauseReason, ServerState

# -- reads ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StatusRequest(Record):
    """GET /v1/status takes nothing."""


@dataclass(frozen=True)
class LogRequest(Record):
    server: str                  # from the path
    lines: int = 200             # from the query string


@dataclass(frozen=True)
class LogTail(Record):
    server: str
    path: str
    lines: tuple[str, ...]


# -- actions: requests and answers ------------------------------------------------------------

@dataclass(frozen=True)
class MaxTokensRequest(Record):
    value: int
    requeue_truncated: bool = False   # also re-run what was truncated under a lower limit
    # Continue each answer truncated under a lower limit from its exact tokens (those with
    # no stored tokens run again from the start); requests in flight that end truncated at
    # their old limit are continued too. Not with requeue_truncated.
    continue_truncated: bool = False
    include_loops: bool = False       # continue the looping truncated answers too
    # The count the caller showed (its status snapshot's `job.truncated`): no more than that
    # many are requeued, the earliest finished, so the number shown is the number requeued.
    requeue_at_most: int | None = None


@dataclass(frozen=True)
class MaxTokensResult(Record):
    old: int
    new: int
    requeued: int | None         # prompts requeued, when asked
    continued: int | None = None        # answers to be continued from their tokens, when asked
    from_scratch: int | None = None     # ... truncated with no stored tokens: re-run from the start
    tokens_kept: int | None = None      # output tokens the continued ones will not decode again


@dataclass(frozen=True)
class RequeueTruncatedRequest(Record):
    # Degenerate loops (truncated answers repeating themselves) stay unless asked: they
    # would loop again at the new limit, at its cost.
    include_loops: bool = False


@dataclass(frozen=True)
class RequeueFailedRequest(Record):
    reason_like: str | None = None   # only failures whose error contains this text


@dataclass(frozen=True)
class RequeueResult(Record):
    what: str                    # "truncated" or "failed"
    count: int                   # prompts back to pending
    below_max_tokens: int | None = None   # truncated under a limit lower than this
    loops_left: int | None = None  # truncated degenerate loops left alone (truncated only)


@dataclass(frozen=True)
class PauseRequest(Record):
    reason: str


@dataclass(frozen=True)
class PauseResult(Record):
    changed: bool                # False: the operator's pause already had this reason
    reason: str
    paused: tuple[PauseReason, ...]   # every pause in force now


@dataclass(frozen=True)
class ResumeRequest(Record):
    """Resume takes nothing: it lifts every pause an operator may lift."""


@dataclass(frozen=True)
class ResumeResult(Record):
    """Resume lifts the operator's pause and the quality gate's (the operator accepts or has
    fixed the cause); a disk pause lifts itself when space comes back."""
    lifted: tuple[PauseReason, ...]   # empty: nothing an operator can lift was in force
    paused: tuple[PauseReason, ...]   # pauses still in force (disk...)

    @property
    def resumed(self) -> bool:
        return bool(self.lifted)


@dataclass(frozen=True)
class RestartRequest(Record):
    server: str | None = None    # None: every server, one at a time


@dataclass(frozen=True)
class RestartResult(Record):
    """Accepted: the restart runs in the daemon; progress shows as server_state events."""
    order: tuple[str, ...]       # servers restart in this order, each READY before the next
    reason: str


@dataclass(frozen=True)
class FlagSetting(Record):
    name: str
    value: FlagValue | None      # None removes the flag


@dataclass(frozen=True)
class RetuneRequest(Record):
    flags: tuple[FlagSetting, ...]
    server: str | None = None    # None: every server (rolling)
    add: bool = False            # allow flags the servers do not run with yet (typo guard)


@dataclass(frozen=True)
class FlagChange(Record):
    name: str
    old: FlagValue | None
    new: FlagValue | None


@dataclass(frozen=True)
class RetuneResult(Record):
    """Accepted: the rolling restart runs in the daemon and stops at the first server
    that does not come back READY with the new flags."""
    changes: tuple[FlagChange, ...]
    order: tuple[str, ...]


@dataclass(frozen=True)
class ResetRequest(Record):
    server: str                  # from the path; the body is an empty object


@dataclass(frozen=True)
class ResetResult(Record):
    server: str
    was: ServerState             # FAILED; the server starts again with a clean history


@dataclass(frozen=True)
class ErrorBody(Record):
    """Every 4xx/5xx answer: one line saying what was wrong."""
    error: str
    status: int = 400

