"""The saturation guard: one server's live in-flight limit, lowered when SGLang says it is
saturated and raised back one careful step at a time when it has calmed down.

Why here, beside overcommit.py: it is a policy over one server's own SGLang figures, poll by
poll, like the over-commit flag it reads; the dispatcher only honours the number it sets
(servers/inflight_limit.py), and this module does no I/O at all (the monitor feeds it polls
and says what it decided, sglang_monitor.py).

Signs of saturation:
- SGLang queues part of what we send (overcommit.py), and has admitted no more for
  `settle_s` (a shrinking queue or a growing batch is SGLang still admitting: at start, a
  slow server prefills a burst of requests a few at a time): its scheduler admits requests by what
  their KV reservations would need, not by what they use, so it can run 7 of 12 with the
  pool only a third full (SGLang 0.5.23 on a 4096-token pool at 700 max tokens). What it
  runs is what it can run: the limit goes to `num_running_reqs`, and never below it while
  `token_usage` is under `kv_full` -- below that SGLang has room, and a lower limit would
  only starve it;
- SGLang retracts running requests (overcommit.py), or its `token_usage` is at `kv_full`:
  the KV pool was full during decode, so the running count itself is too many; the limit
  goes one step down (or to what still runs). The usage gauge is read after the retraction
  has freed the pool, so a retraction is taken as a full pool whatever the gauge says;
- a collapse of the speed per request: SGLang's `gen_throughput` divided by the requests we
  keep on it (at most the limit), under `collapse_ratio` of its recent peak at this limit
  for `collapse_polls` polls in a row, while we keep the server as busy as at the peak (a
  quiet job winding down is not a collapse). Per request, because a lower limit lowers the
  total by itself: read raw, the guard's own cut looks like a collapse and it cuts again.
  A throttled or failing GPU slows every request, so this cut may go below the running
  count.

Judging a limit: only once the requests in flight have drained to it. After a cut the
server still runs what was sent before; its queue, its speed and its throughput say nothing
about the new limit until our in-flight count is at or under it, and then `settle_s` more
for the figures to show it. Until then no further cut, and no peak is learnt.

Following: while SGLang runs more of ours than the limit (what was sent before a cut,
draining) with its KV pool under `kv_full`, the limit is raised to that count at once -- a
queue read on a slow start can hide what SGLang admits a few seconds later (only after a
cut for a queue: not after a collapse or a full pool).

Lowering: never by more than half at once (one odd reading must not empty the server) and
never below `floor`.

A collapse that lasts after its cut is not calm: from that cut until the limit is back at the
max, each poll's speed per request is held against the peak's (a smaller batch
decodes each request at least as fast, so this is fair to the cut). Under `collapse_ratio`
of it, the limit is held where it is: no step up, and no deeper cut, since fewer requests did
not bring the speed back (a throttled or failing GPU is not fixed by starving it).

Raising: once drained, after `calm_s` with no sign at all (and at least `calm_s` since the
last change), one step up, to at most the limit the server was started with (configured or
read from SGLang's /server_info), and only when SGLang has queued none of ours for `calm_s`
(a limit one above what it admits, one request waiting for a free slot now and then, is
where it settles, not a reason to go higher); then another calm interval before the next
step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class GuardPolicy:
    floor: int = 4                  # never below (nor above the server's own max)
    calm_s: float = 60.0            # sign-free time before each step up
    settle_s: float = 20.0          # time after a cut has drained before the next cut
    collapse_ratio: float = 0.5     # speed per request under this share of its peak (0: off)
    collapse_polls: int = 3
    peak_window_s: float = 300.0    # the "recent" in recent peak
    # Busy enough to judge throughput: in flight at least this share of the limit.
    busy_share: float = 0.75
    # KV usage (sglang:token_usage, 0..1) under which SGLang has room: no cut below what
    # it runs. 0.9: SGLang's own retraction starts near a full pool, and its usage gauge
    # moves with every admitted prefill, so "full" needs some margin.
    kv_full: float = 0.9

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
        if not 0 < self.kv_full <= 1:
            raise ValueError(f"saturation guard: kv_full must be within (0, 1], "
                             f"got {self.kv_full}")


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
    queued: int | None = None        # sglang:num_queue_reqs
    token_usage: float | None = None  # sglang:token_usage, 0..1
    retracting: bool = False         # the over-commit sign at this poll is retractions


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


def _queues_ours(poll: GuardPoll) -> bool:
    """SGLang holds some of our requests in its queue now (not someone else's: it runs
    fewer than we have in flight to it)."""
    return (poll.queued is not None and poll.queued > 0 and poll.running is not None
            and poll.running < poll.in_flight)


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
        # When our in-flight count first came down to the limit after the last cut (None:
        # not yet; the max needs no draining).
        self._drained_at: float | None = float("-inf")
        self._calm_since: float | None = None
        # The first poll of the current unbroken run of polls where SGLang queues some of
        # ours without admitting more, and its queue and running count then: a queue is cut
        # for only once it has held `settle_s` so (a shrinking queue or a growing batch is
        # SGLang still admitting, e.g. prefilling a burst at start on a slow server, not
        # one whose pool is full).
        self._queue_run: tuple[float, int, int] | None = None    # (at, queued, running)
        self._queued_at: float | None = None     # the last poll SGLang queued some of ours
        # The last cut went to what SGLang ran for a queue, its pool with room (not for a
        # full pool nor a collapse): the only cut that `_follow` may take back.
        self._queue_cut = False
        # (at, tok/s per request, tok/s, requests), at this limit, once drained and settled
        self._peak: deque[tuple[float, float, float, int]] = deque()
        self._collapsed_polls = 0
        # From a cut for a collapse until the limit is back at the max: the speed per
        # request at the peak the collapse was judged against. Per request, so a smaller
        # batch is judged fairly (each of its requests decodes at least as fast).
        self._collapse_ref: float | None = None

    def retune(self, policy: GuardPolicy) -> None:
        """New settings from a config reload, from the next poll on; the limit stays where
        it is (a floor raised above it is reached by the next step up)."""
        self.policy = policy
        self.floor = min(policy.floor, self.max_limit)

    @property
    def drained(self) -> bool:
        return self._drained_at is not None

    def observe(self, poll: GuardPoll) -> LimitChange | None:
        """Take one poll; the change of the limit if this poll changed it."""
        if not poll.figures:
            return None
        if self._drained_at is None and poll.in_flight <= self.limit:
            self._drained_at = poll.at
        if not _queues_ours(poll):
            self._queue_run = None
        else:
            self._queued_at = poll.at
        if _queues_ours(poll) and self.drained:
            assert poll.queued is not None and poll.running is not None
            run = self._queue_run
            # Counted from the drain (the queue of the requests sent before the last cut
            # shrinks as they drain, and says nothing about this limit), and again from any
            # poll where SGLang admitted more: it runs more, or its queue is shorter.
            if run is None or poll.running > run[2] or poll.queued < run[1]:
                self._queue_run = (poll.at, poll.queued, poll.running)
        sign = self._sign(poll)
        if sign is not None:
            self._calm_since = None
            cut = self._lower(poll, sign)
            if cut is not None:
                return cut
        follow = self._follow(poll)
        if follow is not None or sign is not None:
            return follow
        if self._still_collapsed(poll):
            # The cut did not bring the speed back: not calm (no step up), and no deeper cut
            # either, since fewer requests did not help; held until it recovers.
            self._calm_since = None
            return None
        if not self.drained:
            # Calm is judged at this limit too: not while what was sent above it runs.
            self._calm_since = None
            return None
        if self._calm_since is None:
            self._calm_since = poll.at
        return self._raise(poll)

    # -- signs --------------------------------------------------------------------------------

    def _sign(self, poll: GuardPoll) -> str | None:
        collapse = self._collapse(poll)
        if poll.overcommitted:
            return f"over-committed: {poll.overcommit_reason or 'SGLang queues or retracts'}"
        return collapse

    def _streams(self, poll: GuardPoll) -> int:
        """What the throughput is divided by: our requests on the server, at most the limit.
        Not SGLang's running gauge: it is sampled at another instant than gen_throughput
        (which covers its last decode_log_interval steps), and with short requests it reads
        1 one poll and 8 the next, so per-running-request speed swings tenfold with no
        change in the server."""
        return max(0, min(poll.in_flight, self.limit))

    def _per_stream(self, poll: GuardPoll) -> float | None:
        streams = self._streams(poll)
        if poll.gen_throughput is None or streams <= 0:
            return None
        return poll.gen_throughput / streams

    def _busy(self, poll: GuardPoll) -> bool:
        """Judging this limit's speed: drained to it, `settle_s` past that after a cut
        (SGLang's gen_throughput covers its last `decode_log_interval` decode steps, 40 by
        default: seconds old on a slow server), and kept busy."""
        if self._drained_at is None:
            return False
        if self._last_cut is not None and poll.at - self._drained_at < self.policy.settle_s:
            return False
        return poll.in_flight >= self.policy.busy_share * self.limit

    def _collapse(self, poll: GuardPoll) -> str | None:
        p = self.policy
        per = self._per_stream(poll)
        if p.collapse_ratio <= 0 or per is None or poll.gen_throughput is None:
            return None
        while self._peak and self._peak[0][0] < poll.at - p.peak_window_s:
            self._peak.popleft()
        busy = self._busy(poll)
        peak = max(self._peak, key=lambda e: e[1], default=None)
        if busy:
            self._peak.append((poll.at, per, poll.gen_throughput, self._streams(poll)))
        if busy and peak is not None and peak[1] > 0 and per < p.collapse_ratio * peak[1]:
            self._collapsed_polls += 1
        else:
            self._collapsed_polls = 0
            return None
        if self._collapsed_polls < p.collapse_polls:
            return None
        return (f"{_COLLAPSE} to {poll.gen_throughput:.0f} tok/s over "
                f"{self._streams(poll)} requests in flight, {per:.1f} tok/s each: "
                f"{per / peak[1]:.0%} of its recent peak {peak[1]:.1f} tok/s each "
                f"({peak[2]:.0f} tok/s over {peak[3]}), for {self._collapsed_polls} polls")

    def _peak_per_request(self) -> float | None:
        if not self._peak:
            return None
        return max(e[1] for e in self._peak)

    def _still_collapsed(self, poll: GuardPoll) -> bool:
        """After a cut for a collapse: is each request still decoding under
        collapse_ratio of its speed at the peak? Only a busy poll tells (an idle server is
        no evidence)."""
        ref, per = self._collapse_ref, self._per_stream(poll)
        if ref is None or per is None or self.policy.collapse_ratio <= 0:
            return False
        if poll.in_flight < self.policy.busy_share * self.limit or poll.in_flight <= 0:
            return self.reason is not None and self.reason.startswith(_COLLAPSE)
        return per < self.policy.collapse_ratio * ref

    # -- moves --------------------------------------------------------------------------------

    def _lower(self, poll: GuardPoll, sign: str) -> LimitChange | None:
        if self.limit <= self.floor:
            return None
        if self._drained_at is None:
            return None          # the last cut's requests are still in flight above it
        if self._last_cut is not None and poll.at - self._drained_at < self.policy.settle_s:
            return None          # drained, but not yet long enough to show the cut's effect
        collapse = sign.startswith(_COLLAPSE)
        running = poll.running
        pool_full = poll.retracting or (poll.token_usage is not None
                                        and poll.token_usage >= self.policy.kv_full)
        if collapse or pool_full or running is None:
            # Below what SGLang runs only here: every request slowed down, or the KV pool is
            # full (a retraction, or the gauge at kv_full), or no running count to go by.
            target = self.limit - self.step
            how = f"by a step of {self.step}"
            if running is not None and running < self.limit:
                target = min(target, running)
                how = f"to the {running} SGLang runs"
            # The sign may name a queue (it came first); say what allowed a cut this deep.
            if poll.retracting:
                how += " (SGLang is retracting: its KV pool filled)"
            elif pool_full and poll.token_usage is not None:
                how += f" (KV pool full: {poll.token_usage:.0%})"
        elif _queues_ours(poll) and self._queue_run is not None:
            if poll.at - self._queue_run[0] < self.policy.settle_s:
                return None      # not held long enough yet, or SGLang is still admitting
            # SGLang runs this many with room in its KV pool: exactly that, never below.
            target, how = running, f"to the {running} SGLang runs"
            if poll.token_usage is not None:
                how += f" (KV pool {poll.token_usage:.0%} full)"
        else:
            # The flag outlives its sign (overcommit.py clear_polls) and SGLang now runs all
            # we send, with room: nothing to cut.
            return None
        new = max(target, self.floor, self.limit // 2)
        if new >= self.limit:
            return None
        if new > target:
            # Halved at most per cut (or held at the floor): say the limit it got, not only
            # the target it was going for.
            bound = "the floor" if new == self.floor else f"half of {self.limit}"
            how = f"to {new}, {bound} (aimed {how}: a cut at most halves the limit)"
        change = LimitChange(self.limit, new, f"{sign}; lowered {how}")
        self._queue_cut = not (collapse or pool_full or running is None)
        if collapse and self._collapse_ref is None:
            self._collapse_ref = self._peak_per_request()
        self.limit, self.reason = new, sign
        self._last_change = self._last_cut = poll.at
        self._drained_at = poll.at if poll.in_flight <= new else None
        # Throughput at the new limit is the new reference, learnt once drained to it.
        self._peak.clear()
        self._collapsed_polls = 0
        self._queue_run = None
        return change

    def _follow(self, poll: GuardPoll) -> LimitChange | None:
        """SGLang runs more of ours than the limit (the requests sent before a cut, still
        draining) with room in its KV pool: it can run that many, so the limit is raised
        to it at once -- never below what SGLang runs while its pool has room. Only after a
        cut for a queue: after a collapse fewer requests is the point, and after a full
        pool what still runs is the excess."""
        running = poll.running
        if running is None or running <= self.limit or self.limit >= self.max_limit:
            return None
        if poll.token_usage is None or poll.token_usage >= self.policy.kv_full:
            return None
        if not self._queue_cut or poll.retracting:
            return None
        new = min(running, self.max_limit)
        change = LimitChange(self.limit, new,
                             f"SGLang runs {running} of ours with its KV pool "
                             f"{poll.token_usage:.0%} full: raised to what it runs")
        self.limit = new
        self.reason = None if new >= self.max_limit else self.reason
        self._last_change = poll.at
        self._drained_at = poll.at if poll.in_flight <= new else None
        self._peak.clear()
        return change

    def _raise(self, poll: GuardPoll) -> LimitChange | None:
        now = poll.at
        if self.limit >= self.max_limit:
            return None
        calm = self.policy.calm_s
        assert self._calm_since is not None
        if now - self._calm_since < calm:
            return None
        if self._last_change is not None and now - self._last_change < calm:
            return None
        if self._queued_at is not None and now - self._queued_at < calm:
            return None          # SGLang admits no more than this now: settled here
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
