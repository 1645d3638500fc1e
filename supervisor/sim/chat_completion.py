"""POST /v1/chat/completions, non-streaming, in SGLang 0.5.x's shapes.

Response: {id, object "chat.completion", created, model, choices: [{index, message: {role,
content, reasoning_content, tool_calls}, logprobs, finish_reason, matched_stop}], usage:
{prompt_tokens, total_tokens, completion_tokens, prompt_tokens_details, reasoning_tokens},
metadata}. Errors are SGLang's ErrorResponse: {object "error", message, type, param, code}.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import anyio

from .batch_slots import BatchSlots
from .faults import FaultState
from .filler_text import count_prompt_tokens, filler
from .options import SimOptions
from .looping_text import (LoopPlan, list_text, loop_plan, looping_text, numbered_list,
                           prompt_words)
from .output_plan import (OutputPlan, is_empty, natural_length, plan_output, prompt_digest,
                          text_offset)

# Qwen3's <|im_end|>, reported as matched_stop when the model stopped by itself.
_EOS_TOKEN_ID = 151645


class BadRequest(Exception):
    """Becomes HTTP 400 with SGLang's error body."""


def error_body(message: str, code: int = 400, kind: str = "BadRequestError") -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, Any]]
    model: str | None
    max_tokens: int | None
    thinking: bool
    separate_reasoning: bool


def _int_or_none(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{key} must be a non-negative integer, got {value!r}")
    return value


def parse_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: field required (a non-empty list)")
    if body.get("stream"):
        raise BadRequest("streaming is not supported by the simulated server")
    # max_completion_tokens is the newer OpenAI name; SGLang prefers it when both are set.
    max_tokens = _int_or_none(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _int_or_none(body, "max_tokens")
    kwargs = body.get("chat_template_kwargs") or {}
    separate = body.get("separate_reasoning", True) is not False
    # Qwen3-style templates: enable_thinking decides; absent, thinking is on when the
    # client asked for the trace to be separated, as the daemon does.
    enable = kwargs.get("enable_thinking") if isinstance(kwargs, dict) else None
    thinking = bool(enable) if enable is not None else "separate_reasoning" in body and separate
    model = body.get("model")
    return ChatRequest(messages, model if isinstance(model, str) else None, max_tokens,
                       thinking, separate)


def _split(text: str, first: int) -> tuple[str, str]:
    words = text.split(" ")
    return " ".join(words[:first]), " ".join(words[first:])


def _message(plan: OutputPlan, req: ChatRequest, offset: int, loop: LoopPlan | None,
             listed: bool) -> dict[str, Any]:
    if loop is not None or listed:
        # Loops and lists are built whole, then split where the thinking ended.
        text = (looping_text(plan.completion_tokens, offset, loop, prompt_words(req.messages))
                if loop is not None else list_text(plan.completion_tokens, offset))
        thought, content = _split(text, plan.reasoning_tokens) if req.thinking else ("", text)
        reasoning = thought if req.thinking else None
    else:
        reasoning = filler(plan.reasoning_tokens, offset) if req.thinking else None
        content = filler(plan.answer_tokens, offset + plan.reasoning_tokens + 7)
    if req.thinking and not req.separate_reasoning:
        # No reasoning parser split: the raw trace stays in content, markers and all.
        closing = "</think>\n\n" if plan.thinking_finished else ""
        content = f"<think>\n{reasoning}\n{closing}{content}"
        reasoning = None
    return {"role": "assistant", "content": content, "reasoning_content": reasoning,
            "tool_calls": None}


class ChatHandler:
    def __init__(self, opts: SimOptions, slots: BatchSlots, faults: FaultState,
                 on_finished: Callable[[int, int, bool], None]) -> None:
        self.opts = opts
        self.slots = slots
        self.faults = faults
        self.on_finished = on_finished

    def decode_seconds(self, tokens: int) -> float:
        if self.opts.instant:
            return 0.0
        return tokens / self.opts.tokens_per_s / self.opts.time_scale

    async def complete(self, body: Any) -> dict[str, Any]:
        req = parse_request(body)
        opts = self.opts
        prompt_tokens = count_prompt_tokens(req.messages)
        if prompt_tokens >= opts.context_length:
            raise BadRequest(f"The input ({prompt_tokens} tokens) is longer than the model's "
                             f"context length ({opts.context_length} tokens).")
        max_tokens = req.max_tokens
        if max_tokens is not None and max_tokens + prompt_tokens >= opts.context_length:
            # SGLang's tokenizer manager refuses this too, unless --allow-auto-truncate
            # lets it shrink the budget to what the context leaves.
            if not opts.allow_auto_truncate:
                raise BadRequest(
                    "Requested token count exceeds the model's maximum context length of "
                    f"{opts.context_length} tokens. You requested a total of "
                    f"{max_tokens + prompt_tokens} tokens: {prompt_tokens} tokens from the "
                    f"input messages and {max_tokens} tokens for the completion. Please reduce "
                    "the number of tokens in the input messages or the completion to fit "
                    "within the limit.")
            max_tokens = max(0, opts.context_length - prompt_tokens)
        digest = prompt_digest(req.messages, opts.seed)
        if is_empty(digest, self.faults.empty_rate):
            plan = OutputPlan(1, 0, 0, "stop", True)
            message: dict[str, Any] = {"role": "assistant", "content": "",
                                       "reasoning_content": None, "tool_calls": None}
        else:
            natural = natural_length(digest)
            loop = loop_plan(digest, natural, opts.loop_share, len(prompt_words(req.messages)))
            plan = plan_output(digest, max_tokens=max_tokens, thinking=req.thinking,
                               room=opts.context_length - prompt_tokens,
                               looping=loop is not None)
            message = _message(plan, req, text_offset(digest), loop,
                               loop is None and opts.loop_share > 0
                               and numbered_list(digest, natural))
        async with self.slots.slot(prompt_tokens + plan.completion_tokens):
            delay = self.decode_seconds(plan.completion_tokens)
            if delay > 0:
                await anyio.sleep(delay)
            while self.faults.is_stalled:
                await anyio.sleep(0.05)        # the slot stays taken, as in a stuck batch
        self.slots.finished(prompt_tokens, plan.completion_tokens)
        self.on_finished(prompt_tokens, plan.completion_tokens, False)
        return {
            "id": uuid.uuid4().hex,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model or opts.model_name,
            "choices": [{
                "index": 0, "message": message, "logprobs": None,
                "finish_reason": plan.finish_reason,
                "matched_stop": _EOS_TOKEN_ID if plan.finish_reason == "stop" else None,
            }],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + plan.completion_tokens,
                "completion_tokens": plan.completion_tokens,
                "prompt_tokens_details": None,
                "reasoning_tokens": plan.reasoning_tokens,
            },
            "metadata": {"weight_version": "default"},
        }
