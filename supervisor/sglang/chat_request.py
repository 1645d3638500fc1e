"""The chat completion the daemon asks of SGLang 0.5.23: its body and its one route.

The request carries thinking on or off as the job says (`chat_template_kwargs.enable_thinking`
for the template, `separate_reasoning` so SGLang's reasoning parser splits the trace into
reasoning_content) and the live max tokens; streamed, its own request id (request_ids.py).
What the answer means for the prompt is the dispatcher's to judge
(supervisor/dispatch/completion.py, stream_answer.py).

Posted through the dispatch path's aiohttp session, the one HTTP client of every completion
and every streamed chunk (supervisor/dispatch/worker_client.py says why aiohttp there).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp

from supervisor.config import GenerationSection
from supervisor.sglang.token_ids import RETURN_IDS_HEADERS

# SGLang's OpenAI-compatible chat route (`sglang/srt/entrypoints/http_server.py:1870`
# openai_v1_chat_completions, served by `sglang/srt/entrypoints/openai/serving_chat.py`).
CHAT_PATH = "/v1/chat/completions"
JSON_HEADERS = {"content-type": "application/json"}     # every body we post is JSON
IDS_HEADERS = {**JSON_HEADERS, **RETURN_IDS_HEADERS}


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
    # Always said, off included: Qwen3's template thinks when nothing is said, and SGLang
    # reads a missing enable_thinking as on for a thinking-by-default parser
    # (`sglang/srt/entrypoints/openai/serving_chat.py` _get_reasoning_from_request).
    body["chat_template_kwargs"] = {"enable_thinking": bool(gen.enable_thinking)}
    if gen.enable_thinking:
        body["separate_reasoning"] = True
    return body


def post_chat(client: aiohttp.ClientSession, base_url: str, body: bytes,
              timeout: aiohttp.ClientTimeout, *, token_ids: bool = False
              ) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
    """The POST of one chat completion (`async with post_chat(...) as resp:`), streamed or
    not as its body says; `timeout` bounds connecting and each read, not the whole answer.
    `token_ids`: ask for the exact ids in the stream's `sglext` chunk (token_ids.py)."""
    return client.post(base_url + CHAT_PATH, data=body,
                       headers=IDS_HEADERS if token_ids else JSON_HEADERS, timeout=timeout)
