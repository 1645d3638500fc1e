"""What a chat completion's answer means for the prompt.

The request is built by supervisor/sglang/chat_request.py. The answer is classified here, in
one place, because the difference between "retry", "failed for good" and "the server went
away" decides whether a prompt is lost, duplicated or retried forever.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from state.records import Completion
from supervisor.sglang.context_refusal import KIND as CONTEXT_REFUSAL
from supervisor.sglang.context_refusal import is_context_refusal


@dataclass(frozen=True)
class Retryable:
    """Try again (an attempt is counted): 5xx, a 400 other than a context-length refusal,
    an abort, an answer we cannot read, no answer in time. `kind` groups errors for the
    circuit breaker ("HTTP 400", "HTTP 503", "timeout", ...)."""
    error: str
    kind: str = "error"
    # Completion tokens the server had generated and we throw away with this answer, where
    # it said (an abort's usage): the waste ledger's `retry` (state/waste_table.py).
    tokens: int = 0


@dataclass(frozen=True)
class Permanent:
    """Never retry: SGLang refused the prompt itself for its length
    (supervisor/sglang/context_refusal.py)."""
    error: str
    kind: str = CONTEXT_REFUSAL


# A generated answer is the store's own record (state/records.py), so a Done carries it as is.
Answer = Completion | Retryable | Permanent

_DONE_REASONS = {"stop", "length", "tool_calls"}


def _error_message(status: int, text: str) -> str:
    """SGLang's error body is {"object":"error","message":...,"code":400}; FastAPI's
    validation errors are {"detail": ...}. Fall back to the raw text, kept short."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("message", "detail", "error"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("message", value)
            if value:
                return f"HTTP {status}: {value if isinstance(value, str) else json.dumps(value)}"[:2000]
    return f"HTTP {status}: {text.strip()[:500] or '(empty body)'}"


def _int(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"usage.{key} is not a token count: {value!r}")
    return value


def classify_response(status: int, text: str) -> Answer:
    if status != 200:
        message = _error_message(status, text)
        # Only a refusal of this prompt's length is the prompt's fault. Every other 400
        # (a chat-template error, a model name SGLang reads as a LoRA adapter, a sampling
        # setting it rejects) is as likely to hit every prompt: an attempt is counted, and
        # the circuit breaker (error_breaker.py) pauses dispatch when the errors pile up.
        if status == 400 and is_context_refusal(message):
            return Permanent(message)
        return Retryable(message, f"HTTP {status}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        return _nonsense(exc, text)
    return classify_answer(data, text)


def _nonsense(exc: Exception, text: str) -> Retryable:
    snippet = text.strip()[:200]
    return Retryable(f"server answered nonsense ({type(exc).__name__}: {exc}): {snippet!r}",
                     "nonsense answer")


def classify_answer(data: Any, text: str) -> Answer:
    """A 200 answer's body, already parsed (`text`: what to quote if it makes no sense).
    The streamed path (stream_answer.py) assembles its chunks into this same shape, so
    both paths are judged here alike."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        reasoning = message.get("reasoning_content")
        if not isinstance(content, str) or not (reasoning is None or isinstance(reasoning, str)):
            raise ValueError("content / reasoning_content are not strings")
        finish = choice.get("finish_reason")
        usage = data.get("usage") or {}
        if not isinstance(usage, dict):
            raise ValueError("usage is not an object")
        reasoning_tokens = _int(usage, "reasoning_tokens")
        if not reasoning_tokens:
            details = usage.get("completion_tokens_details")
            if isinstance(details, dict):
                reasoning_tokens = _int(details, "reasoning_tokens")
        completion = Completion(
            content=content, reasoning_content=reasoning, finish_reason=str(finish),
            prompt_tokens=_int(usage, "prompt_tokens"),
            completion_tokens=_int(usage, "completion_tokens"),
            reasoning_tokens=reasoning_tokens)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        return _nonsense(exc, text)
    if finish == "abort":
        return Retryable("request aborted by the server (finish_reason abort)", "abort",
                         completion.completion_tokens)
    if finish not in _DONE_REASONS:
        return Retryable(f"server answered finish_reason {finish!r}", "finish_reason")
    return completion
