"""Degenerate loops: a truncated answer whose tail keeps repeating itself.

A model that loops never stops by itself, so it runs into max_tokens; re-running it at twice
the limit buys twice the loop. Telling such answers apart from answers that are merely long
is what lets "requeue truncated" skip them.

Two cheap measures over the last TAIL_BYTES of the text (only truncated answers are looked
at, so this costs well under a millisecond per truncated answer):
- the share of its word 6-grams that already occurred earlier in the tail, with digits
  folded to 0 so "Step 41: ... Step 42: ..." still counts as the same text again; scripts
  written without spaces use character 12-grams instead;
- its zlib compression ratio: a loop compresses to little more than one period, whatever
  the language, where prose, code and the simulator's filler stay above ~0.33.
Either one past its threshold flags the answer. A loop whose period is longer than half the
tail shows neither, and is left for the operator to judge: only its tail is cheap to read.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

TAIL_BYTES = 8192
MIN_TOKENS = 64              # a shorter tail tells nothing either way
REPEAT_SHARE = 0.5           # n-grams already seen in the tail
COMPRESSION_RATIO = 0.15     # compressed / raw bytes
_WORD_N, _CHAR_N = 6, 12
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class LoopScore:
    repeat_share: float
    compression_ratio: float
    looping: bool


def tail_of(content: str, reasoning: str | None) -> str:
    """The end of what the model wrote: the answer, after its thinking (a model cut off
    while thinking has all its text in the reasoning)."""
    text = f"{reasoning}\n{content}" if reasoning else content
    raw = text.encode("utf-8")
    if len(raw) <= TAIL_BYTES:
        return text
    return raw[-TAIL_BYTES:].decode("utf-8", "ignore")


def _repeat_share(tail: str) -> tuple[float, int]:
    folded = _DIGITS.sub("0", tail)
    words = folded.split()
    if len(words) * 20 >= len(folded):
        tokens: list[str] | str = words
        n = _WORD_N
    else:
        # Few spaces for this much text: Chinese, Japanese, Thai... Characters, then.
        tokens = "".join(folded.split())
        n = _CHAR_N
    count = len(tokens) - n + 1
    if len(tokens) < MIN_TOKENS or count <= 0:
        return 0.0, len(tokens)
    # A gram already seen is one more than the distinct grams: count them in C (zip of the
    # shifted lists, or the slices of a string), not in a Python loop per gram.
    if isinstance(tokens, list):
        distinct = len(set(zip(*(tokens[k:] for k in range(n)))))
    else:
        distinct = len({tokens[i:i + n] for i in range(count)})
    repeats = count - distinct
    return repeats / count, len(tokens)


def loop_score(content: str, reasoning: str | None = None) -> LoopScore:
    tail = tail_of(content, reasoning)
    share, tokens = _repeat_share(tail)
    raw = tail.encode("utf-8")
    ratio = len(zlib.compress(raw, 6)) / len(raw) if raw else 1.0
    looping = tokens >= MIN_TOKENS and (share >= REPEAT_SHARE or ratio <= COMPRESSION_RATIO)
    return LoopScore(share, ratio, looping)


def is_loop(content: str, reasoning: str | None, finish_reason: str) -> bool:
    """Only an answer cut off at max_tokens can be a degenerate loop: one that stopped by
    itself did not loop forever, whatever it repeated."""
    return finish_reason == "length" and loop_score(content, reasoning).looping
