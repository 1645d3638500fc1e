"""Cheap deterministic text of a given token count.

Benchmarks push thousands of requests a second through the simulator, each answer a few
thousand tokens, so text is never built word by word per request: one long passage is built
at import and every answer is a slice of it (a single C-level copy). One word stands for one
token; words average ~4-5 characters with their space, which is about what a real tokenizer
gives for English, so response sizes on the wire are plausible.
"""

from __future__ import annotations

import random

from .output_plan import MAX_TOKENS
from .toy_tokenizer import WORDS

_SPAN = 8192                       # distinct starting points, so answers differ per prompt
_COUNT = MAX_TOKENS + _SPAN + 1


def _build() -> tuple[str, list[int]]:
    rng = random.Random(20251202)   # fixed: the same text in every process, every run
    words = [rng.choice(WORDS) for _ in range(_COUNT)]
    # A full stop now and then makes the passage read like sentences in a log or a shard.
    for i in range(11, _COUNT, 17):
        words[i] += "."
    text = " ".join(words)
    starts = []                     # starts[i]: index of word i's first character
    pos = 0
    for w in words:
        starts.append(pos)
        pos += len(w) + 1
    starts.append(pos)              # one past the last word (+1 for a virtual space)
    return text, starts


_TEXT, _STARTS = _build()


def filler(tokens: int, offset: int) -> str:
    """`tokens` words starting at word `offset` (mod the span)."""
    if tokens <= 0:
        return ""
    tokens = min(tokens, MAX_TOKENS)
    first = offset % _SPAN
    return _TEXT[_STARTS[first]:_STARTS[first + tokens] - 1]

