"""Degenerate loops and structured long answers, so loop detection has something to find.

A share (`--sim-loop-share`) of the prompts whose natural answer is long (past LONG_TOKENS)
loop instead: after some ordinary text the model repeats one passage until max_tokens cuts
it off, so it never stops by itself at any limit, as a looping model does. The passage is
filler words or the prompt's own words echoed back (real loops often echo), sometimes
numbered ("12. ... 13. ..."), so an exact-match detector would miss it. With a loop share
set, a third of the long answers that do not loop are written as numbered lists: repetitive
in shape, not a loop (the hard case for a detector).

Everything is a pure function of the prompt's digest, like the lengths: `loop_plan` and
`loop_visible` are the labels a test or benchmark checks a detector against.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any

from .filler_text import filler
from .toy_tokenizer import echo_word

LONG_TOKENS = 4096           # loops are drawn among answers longer than this
_ONSET = (64, 3000)          # ordinary tokens before the loop starts
_PERIOD = (4, 1200)          # words per repeated passage (log-uniform)


@dataclass(frozen=True)
class LoopPlan:
    onset: int               # tokens of ordinary text before the loop
    period: int              # words in the repeated passage
    echo_prompt: bool        # the passage is the prompt's own words
    numbered: bool           # each repeat carries a counter


def _draws(digest: bytes, salt: bytes) -> list[float]:
    h = hashlib.blake2b(digest + salt, digest_size=32).digest()
    return [(int.from_bytes(h[i:i + 8], "big") + 0.5) / 2.0 ** 64 for i in range(0, 32, 8)]


def loop_plan(digest: bytes, natural: int, share: float, echo_words: int) -> LoopPlan | None:
    """Whether (and how) this prompt loops; `natural` is its length had it not looped,
    `echo_words` how many words its last user message has."""
    if share <= 0 or natural <= LONG_TOKENS:
        return None
    u = _draws(digest, b"loop")
    if u[0] >= share:
        return None
    onset = int(_ONSET[0] + (_ONSET[1] - _ONSET[0]) * u[1])
    lo, hi = math.log(_PERIOD[0]), math.log(_PERIOD[1])
    period = int(math.exp(lo + (hi - lo) * u[2]))
    echo = u[3] < 1 / 3 and echo_words > 0
    if echo:
        period = min(period, echo_words)
    return LoopPlan(onset, period, echo_prompt=echo, numbered=(u[3] * 3) % 1 < 0.5)


def loop_visible(loop: LoopPlan | None, produced: int) -> bool:
    """The label: the text returned ends inside a loop repeated at least twice (a repeat's
    number, "12.", is a token of its own)."""
    return loop is not None and produced >= loop.onset + 2 * (loop.period + loop.numbered)


def numbered_list(digest: bytes, natural: int) -> bool:
    """A long answer that is a numbered list (not a loop)."""
    return natural > LONG_TOKENS and _draws(digest, b"list")[0] < 1 / 3


_WORD = re.compile(r"\S+")


def prompt_words(messages: Any) -> list[str]:
    """The last user message's words (what a looping model echoes)."""
    for m in reversed(messages if isinstance(messages, list) else []):
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
            return _WORD.findall(m["content"])
    return []


def looping_text(tokens: int, offset: int, loop: LoopPlan, echo: list[str]) -> str:
    """`tokens` tokens: ordinary text, then the passage again and again (one word a token,
    a repeat's number one more; an echoed word is cut to what one token holds:
    toy_tokenizer.py)."""
    head = min(tokens, loop.onset)
    parts = [filler(head, offset)] if head else []
    left = tokens - head
    words = ([echo_word(w) for w in echo[:loop.period]] if loop.echo_prompt else
             filler(loop.period, offset + 20011).split())
    k = 1
    while left > 0:
        item = ([f"{k}."] if loop.numbered else []) + words
        item = item[:left]
        parts.append(" ".join(item))
        left -= len(item)
        k += 1
    return " ".join(parts)


def list_text(tokens: int, offset: int) -> str:
    """A numbered list of distinct items, a number and up to 12 words each, one per line."""
    out, k, used, pos = [], 1, 0, 0
    while used < tokens:
        n = min(12, tokens - used - 1)
        out.append(f"{k}." + (" " + filler(n, offset + pos) if n > 0 else ""))
        used += 1 + n
        pos += n
        k += 1
    return "\n".join(out)
