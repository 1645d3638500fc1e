"""The model's raw text and what SGLang 0.5.23's reasoning parser makes of it.

A Qwen3-style model writes `<think>\\n{thought}\\n</think>\\n\\n{answer}` when thinking. SGLang
splits it only when the server runs with `--reasoning-parser` and the request keeps
`separate_reasoning` (default true) (`sglang/srt/entrypoints/openai/serving_chat.py`
_build_chat_response); otherwise the raw text, markers and all, is the content.

The split (`sglang/srt/parser/reasoning_parser.py` BaseReasoningFormatDetector
detect_and_parse): leading `<think>` tags are dropped; no `</think>` in the text means the
output was cut inside the thinking, so all of it is reasoning and the content is empty;
otherwise reasoning is what precedes the first `</think>` and content what follows, neither
stripped. The response then carries `content` as the text or "" (never null) and
`reasoning_content` as the reasoning or null when empty.
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_START = "<think>"
THINK_END = "</think>"


def raw_output(thought: str | None, answer: str, thinking_finished: bool) -> str:
    """What the model emitted (thought None: it did not think)."""
    if thought is None:
        return answer
    if not thinking_finished:
        return f"{THINK_START}\n{thought}"
    return f"{THINK_START}\n{thought}\n{THINK_END}\n\n{answer}"


@dataclass(frozen=True)
class Split:
    content: str
    reasoning_content: str | None


def split_reasoning(text: str, *, force_reasoning: bool, previous: str | None = None) -> Split:
    """The qwen3-style (`<think>`/`</think>`) detector's non-streaming parse. `previous` is
    the last assistant message of a `continue_final_message` request: the parser starts in
    the state its text leaves (`<think>` in it: reasoning; `</think>`: the answer has begun;
    BaseReasoningFormatDetector.__init__ and _detect_and_parse_impl, previous_content)."""
    previous = previous or ""
    in_reasoning = force_reasoning
    if THINK_START in previous:
        in_reasoning = True
    if THINK_END in previous:
        in_reasoning = False
    if not (in_reasoning or THINK_START in text):
        return Split(text, None)
    body = text
    while body.startswith(THINK_START):
        body = body[len(THINK_START):]
    if THINK_END in body:
        reasoning, content = body.split(THINK_END, 1)
    elif THINK_END in previous:
        reasoning, content = "", body      # the thought ended before this text began
    else:
        reasoning, content = body, ""      # cut off before the thinking ended
    return Split(content or "", reasoning or None)


def thinking_mode(chat_template_kwargs: object, reasoning_parser: str | None) -> bool:
    """Whether SGLang treats the request as reasoning (`serving_chat.py`
    _get_reasoning_from_request): never without a parser; for Qwen3's template (toggle
    `enable_thinking`, on by default) unless the request sets enable_thinking false. This
    also decides whether the scheduler counts reasoning tokens."""
    if not reasoning_parser:
        return False
    kwargs = chat_template_kwargs if isinstance(chat_template_kwargs, dict) else {}
    return kwargs.get("enable_thinking") is not False


def usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int) -> dict[str, object]:
    """`sglang/srt/entrypoints/openai/usage_processor.py` calculate_token_usage, field order
    of protocol.py UsageInfo: completion_tokens_details only when there are reasoning tokens."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": reasoning_tokens,
        "completion_tokens_details": ({"reasoning_tokens": reasoning_tokens}
                                      if reasoning_tokens else None),
    }
