"""Output lengths of recent completions, for the histogram the operator reads truncation
from: a pile-up just below max tokens is seen, not computed."""

from __future__ import annotations

import math
from collections import deque

BUCKETS = 24


class LengthWindow:
    """The last `size` completion token counts; `histogram()` buckets them on demand (the
    edges follow the live max tokens, so the limit is always the last edge or inside)."""

    def __init__(self, size: int = 2000) -> None:
        self._lengths: deque[int] = deque(maxlen=size)
        self.completions_total = 0       # since the daemon started (for /metrics counters)
        self.tokens_total = 0

    def add(self, completion_tokens: int) -> None:
        n = max(0, int(completion_tokens))
        self._lengths.append(n)
        self.completions_total += 1
        self.tokens_total += n

    def histogram(self, max_tokens: int,
                  buckets: int = BUCKETS) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """(edges, counts, samples); edges run from 0 to at least max_tokens + 1 so that an
        answer cut at exactly max_tokens falls in the last bucket below the marker."""
        top = max([max_tokens, *self._lengths]) + 1
        width = max(1, math.ceil(top / buckets))
        edges = tuple(width * i for i in range(buckets + 1))
        counts = [0] * buckets
        for n in self._lengths:
            counts[min(n // width, buckets - 1)] += 1
        return edges, tuple(counts), len(self._lengths)
