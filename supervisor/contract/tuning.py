"""The tuner's records: a canary search over server flags while the job runs (issue 39).

What `POST /v1/tune/start` and `/v1/tune/stop` take and answer, and what the status snapshot
says of the search (`Status.tuning`). Standard library only, like the rest of the contract.

A trial restarts one server (the canary) with one candidate flag set, by the retune's
drain-and-restart (no answer lost), skips its warm-up, then measures its output tok/s over a
window against the other servers (the controls) in the same window. Its figure is the ratio
canary / mean of controls, against the same ratio measured before the change, so a shift in
the workload cancels out; the noise is the spread of that ratio between controls. With one
server there are no controls: the canary before vs after, a weaker measure, said so.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from supervisor.contract.codec import Record
from supervisor.contract.server_status import Flag, FlagValue


class TuneState(StrEnum):
    OFF = "off"                  # never started, or stopped by the operator
    WAITING = "waiting"          # started; waiting for a ready fleet or enough answers
    MEASURING = "measuring"      # the baseline window, before a trial
    TRIAL = "trial"              # a candidate on the canary: restarting, warming or measuring
    PROMOTING = "promoting"      # the winner rolls out to the other servers one at a time
    DONE = "done"                # search over: best flags in force everywhere
    NOT_WORTH_IT = "not-worth-it"  # the remaining job does not pay for a trial (reason says)


class TrialVerdict(StrEnum):
    KEPT = "kept"                # beat the noise: the canary keeps these flags
    REJECTED = "rejected"        # no gain beyond the noise, or less goodput
    FAILED = "failed"            # OOM, crash, not READY, retracting: back to the best known
    ABORTED = "aborted"          # the operator stopped the search, or the daemon stopped


@dataclass(frozen=True)
class FlagRange(Record):
    """One flag of the search space and the values it may take, in the order tried."""
    name: str                    # without dashes: "max-running-requests"
    values: tuple[FlagValue, ...]


@dataclass(frozen=True)
class Trial(Record):
    """One candidate on the canary (the state DB's tune_trials row, as clients see it)."""
    id: int
    server: str                  # the canary
    changed: str                 # what moved: "max-running-requests 16 -> 32"
    flags: tuple[Flag, ...]      # the canary's whole flag set during the trial
    started_at: float            # wall clock
    ended_at: float | None = None
    phase: str = "restarting"    # restarting, warming, measuring, long-batch, ended
    window_s: float | None = None      # measured seconds (warm-up excluded)
    answers: int = 0                   # canary answers in the window
    canary_tok_s: float | None = None  # output tok/s of the canary in the window
    controls_tok_s: float | None = None  # mean output tok/s of a control in the window
    ratio_before: float | None = None  # canary / controls before the change
    ratio_after: float | None = None
    gain: float | None = None          # ratio_after / ratio_before - 1
    noise: float | None = None         # the ratio's spread, control vs control
    verdict: TrialVerdict | None = None
    reason: str | None = None          # one line: why kept, rejected or failed


@dataclass(frozen=True)
class Tuning(Record):
    """The search as the status snapshot carries it (`Status.tuning`; None: no tuner)."""
    state: TuneState = TuneState.OFF
    reason: str = ""             # one line: what it does now, or why it stopped or waits
    canary: str | None = None
    started_by: str | None = None      # the actor that started it (operator or config)
    best: tuple[Flag, ...] = ()        # the best flags known (those kept); in force after
    gain: float | None = None          # the best flags' gain over the start, per GPU
    trials_done: int = 0
    trials_left: int = 0
    trials: tuple[Trial, ...] = ()     # the newest few, oldest first (the DB has them all)
    weak: bool = False                 # no controls (one server): before vs after only


# -- the actions --------------------------------------------------------------------------------

@dataclass(frozen=True)
class TuneStartRequest(Record):
    space: tuple[FlagRange, ...] = ()  # empty: the default space ([tune] or built in)
    server: str | None = None          # the canary; None: the tuner picks one
    max_trials: int | None = None      # None: [tune].max_trials
    force: bool = False                # tune even where it estimates it does not pay


@dataclass(frozen=True)
class TuneStartResult(Record):
    state: TuneState
    reason: str                        # "tuning gpu1: ..." or "not tuning: job ends in 40 min"
    canary: str | None
    space: tuple[FlagRange, ...]
    max_trials: int


@dataclass(frozen=True)
class TuneStopRequest(Record):
    """Stop the search: a trial in progress is aborted and its canary goes back to the best
    flags known (the search's start if none was kept)."""


@dataclass(frozen=True)
class TuneStopResult(Record):
    was: TuneState
    trials_done: int
    best: tuple[Flag, ...]
