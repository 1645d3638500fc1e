"""The saturation guard: one server's live in-flight limit, lowered when SGLang says it is
saturated and raised back one careful step at a time when it has calmed down.

Why here, beside overcommit.py: it is a policy over one server's own SGLang figures, poll by
poll, like the over-commit flag it reads; the dispatcher only honours the number it sets
(dispatch/inflight_limit.py), and this module does no I/O at all (the monitor feeds it polls
and says what it decided, sglang_monitor.py).

Signs of saturation (either one):
- the over-commit flag (overcommit.py): SGLang queues part of what we send, or retracts
  running requests because its KV cache is full. Retracted work is decoded again, so every
  retraction is GPU time thrown away;
- a collapse of generation throughput: SGLang's own `gen_throughput` below `collapse_ratio`
  of its recent peak for `collapse_polls` polls in a row, while we keep the server as busy
  as at the peak (a quiet job winding down is not a collapse).

Lowering: to what SGLang manages to run (`num_running_reqs`) when that is below the limit,
else by one step; never by more than half at once (one odd reading must not empty the
server) and never below `floor`. After a cut the guard waits `settle_s` before the next,
so the queue and the retraction rate have time to show the cut's effect.

A collapse that lasts after its cut is not calm: from that cut until the limit is back at the
max, each poll's throughput per request in flight is held against the peak's (a smaller batch
decodes each request at least as fast, so this is fair to the cut). Under `collapse_ratio`
of it, the limit is held where it is: no step up, and no deeper cut, since fewer requests did
not bring the speed back (a throttled or failing GPU is not fixed by starving it).

Raising: after `calm_s` with no sign at all (and at least `calm_s` since the last change),
one step up, to at most the limit the server was started with (configured or read from
SGLang's /server_info); then another calm interval before the next step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class GuardPolicy:
    floor: int = 4                  # never below (nor above the server's own max)
    calm_s: float = 60.0            # sign-free time before each step up
    settle_s: float = 20.0          # time after a cut before the next cut
    collapse_ratio: float = 0.5     # gen throughput under this share of its peak (0: off)
    collapse_polls: int = 3
    peak_window_s: float = 300.0    # the "recent" in recent peak
    # Busy enough to judge throughput: in flight at least this share of the limit.
    busy_share: float = 0.75

    def __post_init__(self) -> None:
        if self.floor < 1:
            raise ValueError(f"saturation guard: floor must be at least 1, got {self.floor}")
        for name in ("calm_s", "settle_s", "peak_window_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"saturation guard: {name} must be above 0, "
                                 f"got {getattr(self, name)}")
        if not 0 <= self.collapse_ratio < 1:
            raise ValueError("saturation guard: collapse_ratio must be within [0, 1) "
                             f"(0 = off), got {self.collapse_ratio}")
        if self.collapse_polls < 1:
            raise ValueError("saturation guard: collapse_polls must be at least 1, "
                             f"got {self.collapse_polls}")


@dataclass(frozen=True)
class GuardPoll:
    """One poll of the server: what the over-commit detector concluded and SGLang's figures
    (None where it gave none). `figures` False: the scrape failed, no evidence either way."""
    at: float                        # monotonic seconds
    overcommitted: bool
    overcommit_reason: str | None
    running: int | None
    gen_throughput: float | None
    in_flight: int
    figures: bool = True


@dataclass(frozen=True)
class LimitChange:
    old: int
    new: int
    reason: str

    @property
    def lowered(self) -> bool:
        return self.new < self.old


_COLLAPSE = "generation throughput collapsed"


def step_of(max_limit: int) -> int:
    """One step: an eighth of the server's max (at least 1), so a 64-slot server moves by 8
    and climbs back from half in four calm intervals."""
    return max(1, max_limit // 8)


class SaturationGuard:
    """One per READY life (a restarted server starts again at its max)."""

    def __init__(self, max_limit: int, policy: GuardPolicy | None = None) -> None:
        if max_limit < 1:
            raise ValueError(f"saturation guard: max_limit must be at least 1, got {max_limit}")
        self.policy = policy or GuardPolicy()
        self.max_limit = max_limit
        self.floor = min(self.policy.floor, max_limit)
        self.step = step_of(max_limit)
        self.limit = max_limit
        self.reason: str | None = None          # why the limit is below the max, if it is
        self._last_change: float | None = None
        self._last_cut: float | None = None
        self._calm_since: float | None = None
        self._peak: deque[tuple[float, float, int]] = deque()    # (at, tok/s, in flight)
        self._collapsed_polls = 0
        # From a cut for a collapse until the limit is back at the max: the throughput per
        # request in flight at the peak the collapse was judged against. Per request, so a
        # smaller batch is judged fairly (each of its requests decodes at least as fast).
        self._collapse_ref: float | None = None

    def retune(self, policy: GuardPolicy) -> None:
        """New settings from a config reload, from the next poll on; the limit stays where
        it is (a floor raised above it is reached by the next step up)."""
        self.policy = policy
        self.floor = min(policy.floor, self.max_limit)

    def observe(self, poll: GuardPoll) -> LimitChange | None:
        """Take one poll; the change of the limit if this poll changed it."""
        if not poll.figures:
            return None
        sign = self._sign(poll)
        if sign is not None:
            self._calm_since = None
            return self._lower(poll, sign)
        if self._still_collapsed(poll):
            # The cut did not bring the speed back: not calm (no step up), and no deeper cut
            # either, since fewer requests did not help; held until it recovers.
            self._calm_since = None
            return None
        if self._calm_since is None:
            self._calm_since = poll.at
        return self._raise(poll.at)

    # -- signs --------------------------------------------------------------------------------

    def _sign(self, poll: GuardPoll) -> str | None:
        collapse = self._collapse(poll)
        if poll.overcommitted:
            return f"over-committed: {poll.overcommit_reason or 'SGLang queues or retracts'}"
        return collapse

    def _collapse(self, poll: GuardPoll) -> str | None:
        p = self.policy
        tput = poll.gen_throughput
        if p.collapse_ratio <= 0 or tput is None:
            return None
        while self._peak and self._peak[0][0] < poll.at - p.peak_window_s:
            self._peak.popleft()
        busy = poll.in_flight >= p.busy_share * self.limit
        peak = max((v for _, v, _ in self._peak), default=0.0)
        if busy:
            self._peak.append((poll.at, tput, poll.in_flight))
        if busy and peak > 0 and tput < p.collapse_ratio * peak:
            self._collapsed_polls += 1
        else:
            self._collapsed_polls = 0
            return None
        if self._collapsed_polls < p.collapse_polls:
            return None
        return (f"generation throughput collapsed to {tput:.0f} tok/s, {tput / peak:.0%} of "
                f"its recent peak {peak:.0f} tok/s, for {self._collapsed_polls} polls")

    def _peak_per_request(self) -> float | None:
        if not self._peak:
            return None
        _, tput, in_flight = max(self._peak, key=lambda e: e[1])
        return tput / in_flight if in_flight > 0 else None

    def _still_collapsed(self, poll: GuardPoll) -> bool:
        """After a cut for a collapse: is each request still decoding under collapse_ratio
        of its speed at the peak? Only a busy poll tells (an idle server is no evidence)."""
        ref, tput = self._collapse_ref, poll.gen_throughput
        if ref is None or tput is None or self.policy.collapse_ratio <= 0:
            return False
        if poll.in_flight < self.policy.busy_share * self.limit or poll.in_flight <= 0:
            return self.reason is not None and self.reason.startswith(_COLLAPSE)
        collapsed = tput / poll.in_flight < self.policy.collapse_ratio * ref
        return collapsed

    # -- moves --------------------------------------------------------------------------------

    def _lower(self, poll: GuardPoll, sign: str) -> LimitChange | None:
        if self.limit <= self.floor:
            return None
        if self._last_cut is not None and poll.at - self._last_cut < self.policy.settle_s:
            return None          # the last cut has not had time to show its effect
        target = self.limit - self.step
        how = f"by a step of {self.step}"
        if poll.running is not None and poll.running < self.limit:
            target = min(target, poll.running)
            how = f"to the {poll.running} SGLang runs"
        new = max(target, self.floor, self.limit // 2)
        change = LimitChange(self.limit, new, f"{sign}; lowered {how}")
        if sign.startswith(_COLLAPSE) and self._collapse_ref is None:
            self._collapse_ref = self._peak_per_request()
        self.limit, self.reason = new, sign
        self._last_change = self._last_cut = poll.at
        # Throughput at the new limit is the new reference: judged against the old peak,
        # a smaller batch would read as a collapse and cut again.
        self._peak.clear()
        self._collapsed_polls = 0
        return change

    def _raise(self, now: float) -> LimitChange | None:
        if self.limit >= self.max_limit:
            return None
        calm = self.policy.calm_s
        assert self._calm_since is not None
        if now - self._calm_since < calm:
            return None
        if self._last_change is not None and now - self._last_change < calm:
            return None
        new = min(self.max_limit, self.limit + self.step)
        change = LimitChange(self.limit, new,
                             f"calm for {now - self._calm_since:.0f} s (no queue, retractions "
                             f"or collapse): raised by a step of {self.step}")
        self.limit = new
        self.reason = None if new >= self.max_limit else self.reason
        if new >= self.max_limit:
            self._collapse_ref = None
        self._last_change = now
        self._calm_since = now          # one step per calm interval
        self._peak.clear()
        return change
