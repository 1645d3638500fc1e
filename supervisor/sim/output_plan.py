"""What the simulated model writes for a prompt: how many tokens, how they split between the
thinking trace and the answer, and where max_tokens cuts them off.

Lengths are a pure function of (prompt, seed): the same prompt always gives the same length,
so a test or a demo run is reproducible and a retried prompt behaves like the real model at
temperature 0. The distribution is a lognormal, because real reasoning traces are
heavy-tailed: most answers are a couple of thousand tokens, a fifth run past 4,096 (the
incident in DESIGN.md: 18% truncated at 4,096) and only a few past 8,192.

  P(L > 4096) = 0.18  ->  (ln 4096 - mu) / sigma = 0.915
  P(L > 8192) = 0.03  ->  (ln 8192 - mu) / sigma = 1.881
  => sigma = ln 2 / 0.966 = 0.7176, mu = ln 4096 - 0.915 * sigma = 7.661 (median ~2,120)
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from .toy_tokenizer import canonical_messages

LOG_MU = 7.661
LOG_SIGMA = 0.7176
MIN_TOKENS = 8
MAX_TOKENS = 32768            # the longest trace the simulated model ever writes
_NORMAL = NormalDist()


def prompt_digest(messages: Any, seed: int) -> bytes:
    """A stable fingerprint of the prompt as the model sees it (each message's role and
    text), so the same prompt sent as messages or as input_ids gets the same answer; key
    order and whitespace do not matter."""
    if isinstance(messages, list):
        messages = canonical_messages(messages)
    text = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(f"{seed}\x00{text}".encode(), digest_size=32).digest()


def _uniform(digest: bytes, slot: int) -> float:
    """The slot-th independent uniform draw in (0, 1) from the digest (8 bytes each)."""
    n = int.from_bytes(digest[slot * 8:(slot + 1) * 8], "big")
    return (n + 0.5) / 2.0 ** 64


def natural_length(digest: bytes) -> int:
    """Tokens the model would write if nothing stopped it."""
    z = _NORMAL.inv_cdf(_uniform(digest, 0))
    return max(MIN_TOKENS, min(MAX_TOKENS, int(math.exp(LOG_MU + LOG_SIGMA * z))))


def thinking_share(digest: bytes) -> float:
    """Share of the output spent thinking: 55-90%, as reasoning models mostly think."""
    return 0.55 + 0.35 * _uniform(digest, 1)


def is_empty(digest: bytes, empty_rate: float) -> bool:
    """Whether this prompt falls in the broken share (a stable subset, like a real bug that
    hits the same prompts every time)."""
    return empty_rate > 0 and _uniform(digest, 2) < empty_rate


def text_offset(digest: bytes) -> int:
    """Where in the filler text this prompt's words start, so answers differ."""
    return int.from_bytes(digest[24:28], "big")


@dataclass(frozen=True)
class OutputPlan:
    completion_tokens: int
    reasoning_tokens: int       # of completion_tokens, spent inside the thinking trace
    answer_tokens: int
    finish_reason: str          # "stop" or "length"
    thinking_finished: bool     # False: cut off inside the trace, so content is ""


def plan_output(digest: bytes, *, max_tokens: int | None, thinking: bool,
                room: int, looping: bool = False) -> OutputPlan:
    """The tokens actually produced. `room` is what the context length leaves after the
    prompt; hitting it ends the answer with "length" just like max_tokens does. A looping
    answer never ends by itself."""
    natural = MAX_TOKENS + 1 if looping else natural_length(digest)
    limit = room if max_tokens is None else min(max_tokens, room)
    limit = max(limit, 0)
    produced = min(natural, limit)
    finish = "length" if natural > limit else "stop"
    if not thinking:
        return OutputPlan(produced, 0, produced, finish, True)
    think = max(1, int(natural * thinking_share(digest)))
    if produced <= think:
        # The budget ran out mid-thought: SGLang's reasoning parser never saw </think>,
        # so everything is reasoning_content and the answer is empty.
        return OutputPlan(produced, produced, 0, finish, produced == natural)
    return OutputPlan(produced, think, produced - think, finish, True)
