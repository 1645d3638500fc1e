"""Is a server over-committed? Read from SGLang's own figures, poll by poll.

Two signs, either one turns the flag on:
- **its queue holds or grows**: for `queue_polls` polls in a row SGLang has at least
  `min_queue` requests waiting (`num_queue_reqs`), the queue is no shorter at the end than at
  the start, and it runs fewer requests than we have in flight to it. Our in-flight limit says the server can run
  that many; a server that queues part of them instead (its KV cache or token budget is
  full) makes every queued request wait for a slot, and the limit is set too high. Our
  in-flight count is capped, so such a queue rises to in-flight − running and then holds:
  a queue that holds above zero for several polls is the same fault as one still growing.
  The running-below-in-flight condition keeps a queue made by some other client of the
  server from being blamed on us. `min_queue` (2) keeps out the request that just arrived:
  a finished request's replacement waits in the queue until the next scheduling step, and
  SGLang's gauges may be read at that instant (sglang/srt/managers/scheduler_components/
  metrics_reporter.py sets num_queue_reqs on its logging ticks).
- **its retractions climb**: SGLang retracts running requests when the KV cache fills during
  decode ("KV cache pool is full. Retract requests"); the retracted work is redone later.
  A retraction rate over `retractions_per_min`, measured over `retraction_polls` poll
  intervals (one burst in one interval is not a trend), turns the flag on.

The flag turns off after `clear_polls` polls in a row with neither sign, so a server at the
edge does not flap on and off every poll. A poll with no figures (a failed scrape) is no
evidence either way: it neither turns the flag on nor counts toward clearing it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class OvercommitPolicy:
    queue_polls: int = 3
    min_queue: int = 2
    retraction_polls: int = 6
    retractions_per_min: float = 10.0
    clear_polls: int = 3

    def __post_init__(self) -> None:
        for name in ("queue_polls", "min_queue", "retraction_polls", "clear_polls"):
            if getattr(self, name) < 1:
                raise ValueError(f"over-commit policy: {name} must be at least 1, "
                                 f"got {getattr(self, name)}")
        if not self.retractions_per_min > 0:
            raise ValueError("over-commit policy: retractions_per_min must be above 0, "
                             f"got {self.retractions_per_min}")


@dataclass(frozen=True)
class Observation:
    """One poll: SGLang's figures (None where it gave none) and our in-flight count."""

    at: float                       # monotonic seconds
    running: int | None
    queued: int | None
    retractions_total: float | None
    in_flight: int


@dataclass(frozen=True)
class OvercommitChange:
    """The flag turned on or off, and why."""

    on: bool
    reason: str


class OvercommitDetector:
    def __init__(self, policy: OvercommitPolicy | None = None) -> None:
        self.policy = policy or OvercommitPolicy()
        self.overcommitted = False
        self.reason: str | None = None
        self._queue: deque[Observation] = deque(maxlen=self.policy.queue_polls)
        self._retractions: deque[tuple[float, float]] = deque(
            maxlen=self.policy.retraction_polls + 1)
        self._clean_polls = 0
        # Which sign held at the last poll with figures: a retraction is SGLang saying its KV
        # pool was full, a queue only that it admitted fewer than we sent (the saturation
        # guard treats them differently, saturation_guard.py).
        self.retracting = False
        self.queueing = False

    def retraction_rate_per_min(self) -> float | None:
        """Retracted requests per minute over the window so far (None before two polls)."""
        if len(self._retractions) < 2:
            return None
        (t0, n0), (t1, n1) = self._retractions[0], self._retractions[-1]
        if t1 <= t0:
            return None
        return (n1 - n0) / (t1 - t0) * 60.0

    def observe(self, obs: Observation) -> OvercommitChange | None:
        """Take one poll; the change of the flag if this poll changed it."""
        queue_sign = self._observe_queue(obs)
        retraction_sign = self._observe_retractions(obs)
        if obs.queued is not None or obs.retractions_total is not None:
            self.queueing = queue_sign is not None
            self.retracting = retraction_sign is not None
        if queue_sign is None and retraction_sign is None:
            if obs.queued is None and obs.retractions_total is None:
                return None          # no figures at all: no evidence either way
            if not self.overcommitted:
                return None
            self._clean_polls += 1
            if self._clean_polls < self.policy.clear_polls:
                return None
            self.overcommitted, self.reason = False, None
            return OvercommitChange(
                False, f"no queue held and under {self.policy.retractions_per_min:g} "
                f"retractions/min for {self._clean_polls} polls")
        self._clean_polls = 0
        reason = "; ".join(r for r in (queue_sign, retraction_sign) if r)
        was = self.overcommitted
        self.overcommitted, self.reason = True, reason
        return None if was else OvercommitChange(True, reason)

    def _observe_queue(self, obs: Observation) -> str | None:
        if obs.queued is None or obs.running is None:
            return None
        self._queue.append(obs)
        window = self._queue
        if len(window) < self.policy.queue_polls:
            return None
        if not all(o.queued is not None and o.queued >= self.policy.min_queue
                   and o.running is not None
                   and o.running < o.in_flight for o in window):
            return None
        first, last = window[0], window[-1]
        assert first.queued is not None and last.queued is not None
        if last.queued < first.queued:
            return None
        trend = "grew" if last.queued > first.queued else "held"
        return (f"queue {trend} over {len(window)} polls ({first.queued} -> {last.queued} "
                f"waiting) while running {last.running} of our {last.in_flight} in flight")

    def _observe_retractions(self, obs: Observation) -> str | None:
        if obs.retractions_total is None:
            return None
        if self._retractions and obs.retractions_total < self._retractions[-1][1]:
            # The counter went back: a new process. Its history starts here.
            self._retractions.clear()
        self._retractions.append((obs.at, obs.retractions_total))
        if len(self._retractions) <= self.policy.retraction_polls:
            return None
        rate = self.retraction_rate_per_min()
        if rate is None or rate <= self.policy.retractions_per_min:
            return None
        return (f"retracting {rate:.1f} requests/min over the last "
                f"{self.policy.retraction_polls} polls (over "
                f"{self.policy.retractions_per_min:g}/min)")
