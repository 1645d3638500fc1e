"""When to restart a failed server, and when to stop trying.

Backoff doubles with each failure still inside the failure window, capped, with jitter so
eight servers that died together (a shared driver fault) do not all reload at the same
instant. Failures age out of the window, so a server that ran well for an hour after one
crash restarts quickly after the next.

The window alone cannot stop a loop whose failures are slow to see: a server that hangs
after every restart is found hung only `hang_timeout_s` later (10 minutes by default), so
five failures never fit in half an hour and it would restart forever. So the policy also
counts the lives in a row that ended in failure before serving `served_after_s` (token
progress sustained that long: hang_rule.py LifeProgress; a life may complete answers and
still fall short, and the words say so): a hang loop and a crash loop both reach FAILED
after `max_unserved_failures` of them, however slowly each is detected,
while a server that served for hours between two failures starts the count again.
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
    unserved_in_row: int = 0   # failed lives in a row that had not served
    reason: str = ""           # why it gives up


class RestartPolicy:
    def __init__(self, initial_s: float, max_s: float, max_failures: int, window_s: float,
                 rng: random.Random | None = None, jitter: float = 0.2,
                 max_unserved: int = 5, served_after_s: float = 300.0) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.max_failures = max_failures
        self.window_s = window_s
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._failures: deque[float] = deque()
        self.max_unserved = max_unserved       # 0: never give up on this count
        self.served_after_s = served_after_s   # for the words only: the caller judges
        self.unserved_in_row = 0

    @classmethod
    def from_config(cls, servers: ServersSection, rng: random.Random | None = None) -> RestartPolicy:
        return cls(servers.backoff_initial_s, servers.backoff_max_s, servers.max_failures,
                   servers.failure_window_s, rng, max_unserved=servers.max_unserved_failures,
                   served_after_s=servers.served_after_s)

    def follow(self, servers: ServersSection) -> None:
        """A reloaded config's backoff and failure limits; the failures seen so far stay."""
        self.initial_s = servers.backoff_initial_s
        self.max_s = servers.backoff_max_s
        self.max_failures = servers.max_failures
        self.window_s = servers.failure_window_s
        self.max_unserved = servers.max_unserved_failures
        self.served_after_s = servers.served_after_s

    def _expire(self, now: float) -> None:
        while self._failures and self._failures[0] <= now - self.window_s:
            self._failures.popleft()

    def failures_in_window(self, now: float) -> int:
        self._expire(now)
        return len(self._failures)

    def delay_for(self, failures: int) -> float:
        base = self.initial_s * 2 ** max(0, failures - 1)
        jittered = base * self._rng.uniform(1 - self.jitter, 1 + self.jitter)
        return min(self.max_s, jittered)

    def record_failure(self, now: float, served: bool = False) -> RestartDecision:
        """One life ended in failure; `served`: it had made sustained progress first."""
        self._expire(now)
        self._failures.append(now)
        n = len(self._failures)
        self.unserved_in_row = 0 if served else self.unserved_in_row + 1
        k = self.unserved_in_row
        # The config's rule: *more than* max_failures within the window gives up.
        if n > self.max_failures:
            return RestartDecision(True, 0.0, n, k,
                                   f"{n} failures within {self.window_s:g} s")
        if self.max_unserved and k >= self.max_unserved:
            return RestartDecision(True, 0.0, n, k,
                                   f"{k} lives in a row failed before "
                                   f"{self.served_after_s:g} s of serving")
        # A slow loop still backs off more each time: by whichever count is higher.
        return RestartDecision(False, self.delay_for(max(n, k)), n, k)

    def reset(self) -> None:
        """An operator brought the server back: start counting afresh."""
        self._failures.clear()
        self.unserved_in_row = 0
