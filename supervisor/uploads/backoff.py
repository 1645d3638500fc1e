"""How long to wait after failed uploads: exponential, capped, with jitter.

Equal jitter (half the step fixed, half random) rather than full jitter: every failure waits
at least half its step, so a store that is down is never hammered by an unlucky zero, while
nodes that failed together still spread out when it comes back.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 1.0
    max_s: float = 120.0

    def step(self, failures: int) -> float:
        """The ceiling after `failures` consecutive failures (1 → initial_s)."""
        if failures <= 0:
            return 0.0
        # The exponent is capped so a day of failures cannot overflow the float.
        return min(self.max_s, self.initial_s * 2.0 ** min(failures - 1, 60))

    def delay(self, failures: int, rng: Callable[[], float] = random.random) -> float:
        step = self.step(failures)
        return step / 2 + rng() * step / 2
