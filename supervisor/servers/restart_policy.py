"""When to restart a failed server, and when to stop trying.

Backoff doubles with each failure still inside the failure window, capped, with jitter so
eight servers that died together (a shared driver fault) do not all reload at the same
instant. Failures age out of the window, so a server that ran well for an hour after one
crash restarts quickly after the next.

Three rules give up, each said in its own words (the FAILED reason and the event name the
rule that fired and what the lives in it answered):

- the window: more than `max_failures` failures within `failure_window_s`, whatever the
  lives answered: "6 failures within 120 s, answering 40 between them". A server that answers
  for ten seconds and crashes, again and again, ends here.
- unanswered: `max_unserved_failures` lives in a row that failed before completing an
  answer: "5 lives in a row failed before answering". A life that completed an answer served
  and starts this count again. It stops a loop the window cannot see: a hang is found only
  `hang_timeout_s` (10 min) after each start, so five never fit in half an hour.
- brief: `max_brief_failures` lives in a row that each failed before `served_after_s` of
  token progress (hang_rule.py LifeProgress), whatever they answered: "10 lives in a row
  each failed within 300 s of serving, answering 12 in all". A scheduler that sticks once its
  first answers are out answers a little at every life, and its hangs are slow to see; this
  count ends that loop. A life that served that long starts it again.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from supervisor.config import ServersSection


@dataclass(frozen=True)
class RestartDecision:
    give_up: bool          # True → FAILED until an operator resets it
    delay_s: float         # backoff before the next start (0 when giving up)
    failures_in_window: int
    unserved_in_row: int = 0   # failed lives in a row that completed no answer
    brief_in_row: int = 0      # failed lives in a row that served under served_after_s
    answered_in_window: int = 0   # answers of the lives whose failures are in the window
    reason: str = ""           # why it gives up: the rule that fired, in its words


@dataclass(frozen=True)
class LifeEnd:
    """What the policy needs of a failed life: its answers and whether it served long."""
    answered: int = 0
    served: bool = False   # its token progress lasted served_after_s


class RestartPolicy:
    def __init__(self, initial_s: float, max_s: float, max_failures: int, window_s: float,
                 rng: random.Random | None = None, jitter: float = 0.2,
                 max_unserved: int = 5, served_after_s: float = 300.0,
                 max_brief: int = 10) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.max_failures = max_failures
        self.window_s = window_s
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._failures: deque[tuple[float, int]] = deque()   # (when, that life's answers)
        self.max_unserved = max_unserved       # 0: never give up on this count
        self.max_brief = max_brief             # 0: never give up on this count
        self.served_after_s = served_after_s   # for the words only: the caller judges
        self.unserved_in_row = 0
        self.brief_in_row = 0
        self._answered_in_row = 0              # what the brief lives in a row answered

    @classmethod
    def from_config(cls, servers: ServersSection, rng: random.Random | None = None) -> RestartPolicy:
        return cls(servers.backoff_initial_s, servers.backoff_max_s, servers.max_failures,
                   servers.failure_window_s, rng, max_unserved=servers.max_unserved_failures,
                   served_after_s=servers.served_after_s,
                   max_brief=servers.max_brief_failures)

    def follow(self, servers: ServersSection) -> None:
        """A reloaded config's backoff and failure limits; the failures seen so far stay."""
        self.initial_s = servers.backoff_initial_s
        self.max_s = servers.backoff_max_s
        self.max_failures = servers.max_failures
        self.window_s = servers.failure_window_s
        self.max_unserved = servers.max_unserved_failures
        self.max_brief = servers.max_brief_failures
        self.served_after_s = servers.served_after_s

    def _expire(self, now: float) -> None:
        while self._failures and self._failures[0][0] <= now - self.window_s:
            self._failures.popleft()

    def failures_in_window(self, now: float) -> int:
        self._expire(now)
        return len(self._failures)

    def delay_for(self, failures: int) -> float:
        base = self.initial_s * 2 ** max(0, failures - 1)
        jittered = base * self._rng.uniform(1 - self.jitter, 1 + self.jitter)
        return min(self.max_s, jittered)

    def record_failure(self, now: float, life: LifeEnd | None = None) -> RestartDecision:
        """One life ended in failure; `life`: what it answered and whether it served long
        (None: it never became READY, so neither)."""
        life = life or LifeEnd()
        self._expire(now)
        self._failures.append((now, life.answered))
        n = len(self._failures)
        answered = sum(a for _, a in self._failures)
        self.unserved_in_row = 0 if life.answered else self.unserved_in_row + 1
        if life.served:
            self.brief_in_row = self._answered_in_row = 0
        else:
            self.brief_in_row += 1
            self._answered_in_row += life.answered
        k, b = self.unserved_in_row, self.brief_in_row

        def decided(reason: str = "") -> RestartDecision:
            delay = 0.0 if reason else self.delay_for(max(n, k, b))
            return RestartDecision(bool(reason), delay, n, k, b, answered, reason)

        # The config's rule: *more than* max_failures within the window gives up.
        if n > self.max_failures:
            return decided(f"{n} failures within {self.window_s:g} s, "
                           f"answering {answered} between them")
        if self.max_unserved and k >= self.max_unserved:
            return decided(f"{k} lives in a row failed before answering")
        if self.max_brief and b >= self.max_brief:
            return decided(f"{b} lives in a row each failed within {self.served_after_s:g} s "
                           f"of serving, answering {self._answered_in_row} in all")
        # A slow loop still backs off more each time: by whichever count is highest.
        return decided()

    def reset(self) -> None:
        """An operator brought the server back: start counting afresh."""
        self._failures.clear()
        self.unserved_in_row = self.brief_in_row = self._answered_in_row = 0
