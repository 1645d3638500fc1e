"""Windowed throughput: req/s, output tok/s, average output tokens, ETA.

Rates come from the last `window_s` seconds, not averages since start, because after a
restart, a pause or a retune the operator needs to know the rate *now*. Until the job has
been running for a whole window the figures are marked warming up.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class RateSnapshot:
    req_per_s: float
    tok_per_s: float
    avg_output_tokens: float     # over the window's completions
    completions: int             # in the window
    span_s: float                # how much time the rates cover
    warming_up: bool


class CompletionRateWindow:
    """Completions and output tokens in one-second buckets over a sliding window."""

    def __init__(self, window_s: float, started_at: float) -> None:
        self.window_s = float(window_s)
        self.started_at = started_at
        self._buckets: deque[list[float]] = deque()   # [second, completions, tokens]

    def add(self, now: float, completions: int, tokens: int) -> None:
        second = math.floor(now)
        if self._buckets and self._buckets[-1][0] == second:
            bucket = self._buckets[-1]
            bucket[1] += completions
            bucket[2] += tokens
        else:
            self._buckets.append([second, completions, tokens])
        self._expire(now)

    def _expire(self, now: float) -> None:
        horizon = now - self.window_s
        while self._buckets and self._buckets[0][0] + 1 <= horizon:
            self._buckets.popleft()

    def snapshot(self, now: float) -> RateSnapshot:
        self._expire(now)
        elapsed = max(0.0, now - self.started_at)
        span = min(self.window_s, elapsed)
        count = sum(int(b[1]) for b in self._buckets)
        tokens = sum(b[2] for b in self._buckets)
        # Below one second a rate is noise; report nothing rather than a huge number.
        rate = count / span if span >= 1.0 else 0.0
        tok_rate = tokens / span if span >= 1.0 else 0.0
        return RateSnapshot(
            req_per_s=rate, tok_per_s=tok_rate,
            avg_output_tokens=tokens / count if count else 0.0,
            completions=count, span_s=span, warming_up=elapsed < self.window_s)


def eta_seconds(remaining: int, req_per_s: float) -> float | None:
    """Seconds to finish `remaining` prompts at the windowed rate; None when unknown."""
    if remaining <= 0:
        return 0.0
    if req_per_s <= 0:
        return None
    return remaining / req_per_s
