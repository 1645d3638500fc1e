"""Continuing a truncated answer from its exact tokens on SGLang 0.5.23's chat route.

What the server does with it (`sglang/srt/entrypoints/openai/serving_chat.py`):
- `input_ids` on the chat route skips the chat template entirely (~1945-1955): the request
  runs on exactly the ids given, here the prompt's ids as the template rendered them the first
  time followed by every output id sampled so far. Decoding then goes on from the last one as
  if it had never stopped: 32 + 32 greedy tokens equal one 64-token greedy run (issue 38).
- `continue_final_message: true` with a last assistant message: the reasoning parser takes
  its starting state from that message's text (`sglang/srt/parser/reasoning_parser.py`
  BaseReasoningFormatDetector.__init__: `<think>` in it = still reasoning, `</think>` in it =
  the answer has begun), so the new part's text is split as the rest of the answer would
  have been. The message's text is not tokenized again (the ids are given).
- max tokens counts the new part only: the new limit minus the tokens the answer has.
  SGLang checks input + max new tokens against the context length, so a continuation fits
  where the same prompt at the new limit fits (live_settings.check_continuation).

The finished answer is stitched here: its ids are the stored ones followed by the new part's,
its text is the server's decoding of all of them (token_ids.detokenize), split into reasoning
and content by the reasoning parser's one-shot rule, and its counts add up the parts.

Exact in distribution only while sampling has no memory of earlier output: penalties
(presence, frequency, repetition), `min_new_tokens` and stop strings restart with the
continuation. The daemon sends none; a server can add them by default
(`--preferred-sampling-params`, or the model's generation_config.json read under
`--sampling-defaults model`, SGLang's default: `sglang/srt/configs/model_config.py`
get_default_sampling_params). `inexact_sampling` names what would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from state.records import Completion, StoredAnswer, TokenIds

THINK_START = "<think>"
THINK_END = "</think>"

# Sampling parameters whose state restarts with a continuation (a new request), with the
# value at which they do nothing.
_INEXACT = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
            "min_new_tokens": 0, "min_tokens": 0, "stop": None}


def assistant_prefix(in_reasoning: bool, thinking: bool) -> str:
    """The last assistant message's text: only what sets the reasoning parser's state."""
    if not thinking:
        return ""
    return THINK_START if in_reasoning else THINK_START + THINK_END


def continuation_body(body: dict[str, Any], stored: StoredAnswer, max_tokens: int,
                      thinking: bool) -> dict[str, Any]:
    """The request that continues `stored` up to `max_tokens` in all, from the body the
    prompt would be sent with (same sampling, stream options and request id)."""
    ids = stored.ids
    out = dict(body)
    out["messages"] = [*body["messages"], {
        "role": "assistant", "content": assistant_prefix(ids.in_reasoning, thinking)}]
    out["input_ids"] = [*ids.prompt_ids, *ids.output_ids]
    out["continue_final_message"] = True
    out["max_completion_tokens"] = max_tokens - len(ids.output_ids)
    return out


def split_answer(text: str, thinking: bool) -> tuple[str, str | None]:
    """(content, reasoning_content) of a whole answer's text, as SGLang's qwen3-style
    reasoning parser splits it in one go (reasoning_parser.py detect_and_parse; a thinking
    request forces reasoning): leading `<think>` dropped, reasoning up to the first
    `</think>` and content after it, neither stripped; no `</think>`: all reasoning."""
    if not thinking:
        return text, None
    body = text
    while body.startswith(THINK_START):
        body = body[len(THINK_START):]
    reasoning, end, content = body.partition(THINK_END)
    return (content if end else ""), (reasoning or None)


def stitch(stored: StoredAnswer, part: Completion, part_ids: list[int], text: str,
           thinking: bool) -> tuple[Completion, TokenIds]:
    """The whole answer from the stored one and the new part (`text`: all ids decoded)."""
    content, reasoning = split_answer(text, thinking)
    ids = stored.ids
    whole = replace(part, content=content, reasoning_content=reasoning,
                    prompt_tokens=len(ids.prompt_ids),
                    completion_tokens=len(ids.output_ids) + part.completion_tokens,
                    reasoning_tokens=stored.reasoning_tokens + part.reasoning_tokens)
    tokens = TokenIds(ids.prompt_ids, (*ids.output_ids, *part_ids),
                      in_reasoning=thinking and THINK_END not in text, parts=ids.parts + 1)
    return whole, tokens


def _preferred(flags: Mapping[str, Any]) -> dict[str, Any]:
    raw = flags.get("preferred-sampling-params")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def _generation_config(model_path: str) -> dict[str, Any]:
    try:
        data = json.loads((Path(model_path) / "generation_config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def inexact_sampling(flags: Mapping[str, Any], model_path: str) -> list[str]:
    """The sampling settings the servers apply that a continuation would not continue
    exactly ("repetition_penalty 1.05 (the model's generation_config.json)")."""
    found: list[str] = []
    for name, value in _preferred(flags).items():
        if name in _INEXACT and value not in (_INEXACT[name], None, [], ""):
            found.append(f"{name} {value!r} (--preferred-sampling-params)")
    if flags.get("sampling-defaults", "model") == "model" and model_path:
        value = _generation_config(model_path).get("repetition_penalty")
        if value not in (None, 1, 1.0):
            found.append(f"repetition_penalty {value!r} (the model's generation_config.json)")
    return found
