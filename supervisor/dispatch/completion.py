"""One chat completion request to SGLang, and what its answer means for the prompt.

The request carries thinking on (`chat_template_kwargs.enable_thinking` for the template,
`separate_reasoning` so SGLang's reasoning parser splits the trace into reasoning_content)
and the live max tokens. The answer is classified here, in one place, because the
difference between "retry", "failed for good" and "the server went away" decides whether a
prompt is lost, duplicated or retried forever.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from state.records import Completion
from supervisor.config import GenerationSection
from supervisor.dispatch.context_refusal import is_context_refusal


def request_body(model: str, messages: list[dict[str, Any]], gen: GenerationSection,
                 max_tokens: int, *, rid: str | None = None) -> dict[str, Any]:
    """The chat completion request; with `rid` a streamed one under that request id (what
    /abort_request names: `ChatCompletionRequest.rid` in
    `sglang/srt/entrypoints/openai/protocol.py`, passed on as GenerateReqInput.rid by
    serving_chat.py)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        # SGLang 0.5.23 marks max_tokens deprecated in favour of max_completion_tokens (which
        # counts reasoning and visible tokens alike) and reads the new name first
        # (`sglang/srt/entrypoints/openai/protocol.py` ChatCompletionRequest): one name only.
        "max_completion_tokens": max_tokens,
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        "stream": False,
    }
    if rid is not None:
        body["stream"] = True
        body["rid"] = rid
        # include_usage: a last chunk with the whole usage (the non-streamed answer's counts);
        # continuous_usage_stats: the running completion_tokens on each chunk, so a stall or
        # a loop knows exactly how many tokens it had cost (`sglang/srt/entrypoints/openai/
        # utils.py` should_include_usage; serving_chat.py _generate_stream_content).
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    # Always said, off too: Qwen3's template thinks when the request says nothing.
    body["chat_template_kwargs"] = {"enable_thinking": gen.enable_thinking}
    if gen.enable_thinking:
        body["separate_reasoning"] = True
    return body


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
    """Never retry: SGLang refused the prompt itself for its length (context_refusal.py)."""
    error: str
    kind: str = "HTTP 400"


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
            return Permanent(message, f"HTTP {status}")
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
