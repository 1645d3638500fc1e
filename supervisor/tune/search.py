"""Which flag set the canary tries next: one flag moved one step at a time.

The search starts from what the canary runs now: its flags, and what SGLang chose where a flag
is not given (`/server_info`'s effective max running requests, the Mamba cap its log warns
of). It moves one flag at a time through the space, in the space's order: a step that beats
the noise is kept and the same flag moves on to its next value; a step that does not (or
fails) ends that flag - the values are ordered from the start outward, so past a step that did
not help (or hit the memory cliff) the next one would not either. The search ends when every
flag has ended or the trial budget is spent. A pure policy object: the runner (tuner.py)
reports each trial's verdict back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from supervisor.contract.tuning import FlagRange, TrialVerdict
from supervisor.sglang.mamba_cap import MambaCap

MRR = "max-running-requests"
MEM = "mem-fraction-static"
MAMBA = "max-mamba-cache-size"
# SGLang 0.5.23's default when --mem-fraction-static is not given varies with the GPU; the
# search steps from the flag when given, and from this common value otherwise.
MEM_DEFAULT = 0.88
MEM_CEILING = 0.95
KV_ROOM = 0.9        # token_usage under this: the KV pool has room for more requests


@dataclass(frozen=True)
class ServerView:
    """What SGLang chose and how it runs, read from /server_info, /metrics and its log."""
    effective_mrr: int | None = None     # effective_max_running_requests_per_dp x dp
    queue_reqs: float | None = None      # num_queue_reqs: requests SGLang holds back
    token_usage: float | None = None     # KV pool use, 0..1
    mamba: MambaCap | None = None        # SGLang capped running requests by its Mamba cache


@dataclass(frozen=True)
class Candidate:
    flag: str
    value: Any
    flags: dict[str, Any]        # the canary's whole flag set for the trial
    changed: str                 # "max-running-requests 16 -> 32"


def default_space(flags: Mapping[str, Any], view: ServerView) -> tuple[FlagRange, ...]:
    """The built-in space around what runs now. Running requests go up only while SGLang
    queues nothing and KV has room (otherwise more requests only wait in SGLang's queue);
    the Mamba cache only when SGLang capped requests by it; memory fraction in small steps."""
    space: list[FlagRange] = []
    mrr = flags.get(MRR, view.effective_mrr)
    queues = view.queue_reqs is not None and view.queue_reqs > 0
    full = view.token_usage is not None and view.token_usage >= KV_ROOM
    if view.mamba is not None:
        # The cap, not the KV pool, sets the running requests: first a cache that lets the
        # flag's requests (at least twice the cap) run, or twice that; then the flag up to
        # match a cache that allows more (a value equal to the flag is skipped).
        cap = view.mamba
        base = max(int(flags.get(MRR) or 0), 2 * cap.running)
        space.append(FlagRange(MAMBA, (cap.cache_for(base), cap.cache_for(2 * base))))
        space.append(FlagRange(MRR, (base, 2 * base)))
    elif mrr is not None and not (queues or full):
        space.append(FlagRange(MRR, tuple(int(mrr) * m for m in (2, 3, 4))))
    mem = float(flags.get(MEM, MEM_DEFAULT))
    steps = [round(mem + 0.02 * i, 2) for i in (1, 2, 3)]
    space.append(FlagRange(MEM, tuple(v for v in steps if v <= MEM_CEILING)))
    return tuple(r for r in space if r.values)


def parse_space(text: Mapping[str, Sequence[Any]]) -> tuple[FlagRange, ...]:
    """`[tune].space` (flag -> list of values) as ranges; ValueError naming a bad entry."""
    ranges = []
    for name, values in text.items():
        if not isinstance(name, str) or not name or name.startswith("-"):
            raise ValueError(f"tune space: flag names go without dashes, got {name!r}")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"tune space: {name}: expected a non-empty list of values, "
                             f"got {values!r}")
        ranges.append(FlagRange(name, tuple(values)))
    return tuple(ranges)


@dataclass
class Search:
    start: dict[str, Any]                # the canary's flags when the search began
    space: tuple[FlagRange, ...]
    max_trials: int
    best: dict[str, Any] = field(init=False)
    trials: int = 0
    _flag: int = 0                       # index into space of the flag moving now
    _step: int = 0                       # the next value's index in that flag's range
    _pending: Candidate | None = None

    def __post_init__(self) -> None:
        self.best = dict(self.start)

    @property
    def done(self) -> bool:
        return self.trials >= self.max_trials or self._flag >= len(self.space)

    @property
    def trials_left(self) -> int:
        return max(0, self.max_trials - self.trials) if not self.done else 0

    def next(self) -> Candidate | None:
        """The next candidate, or None when the search is over."""
        assert self._pending is None, "report the last candidate's verdict first"
        while not self.done:
            r = self.space[self._flag]
            if self._step >= len(r.values):
                self._flag, self._step = self._flag + 1, 0
                continue
            value = r.values[self._step]
            self._step += 1
            old = self.best.get(r.name)
            if old == value:
                continue
            flags = dict(self.best)
            flags[r.name] = value
            self._pending = Candidate(r.name, value, flags,
                                      f"{r.name} {'-' if old is None else old} -> {value}")
            return self._pending
        return None

    def report(self, candidate: Candidate, verdict: TrialVerdict) -> None:
        """The trial's verdict: KEPT moves the best on; anything else ends this flag."""
        assert candidate is self._pending, "a verdict for a candidate not asked for"
        self._pending = None
        if verdict is TrialVerdict.ABORTED:
            return
        self.trials += 1
        if verdict is TrialVerdict.KEPT:
            self.best = dict(candidate.flags)
        else:
            self._flag, self._step = self._flag + 1, 0

    def gained(self) -> dict[str, Any]:
        """The flags that differ from the start (what to put in the config)."""
        return {k: v for k, v in self.best.items() if self.start.get(k) != v}


def flags_change(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """What a retune from `current` to `wanted` passes: changed values, None to remove."""
    change: dict[str, Any] = {k: v for k, v in wanted.items() if current.get(k) != v}
    change.update({k: None for k in current if k not in wanted})
    return change
