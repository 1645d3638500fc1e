"""`stream: true` chat completions as SGLang 0.5.23 sends them
(`sglang/srt/entrypoints/openai/serving_chat.py` _handle_streaming_request,
_generate_chat_stream, _generate_stream_content; chunk shape from
`sglang/srt/entrypoints/openai/sse_utils.py` build_sse_content):

- validation errors are a plain JSON 400 before any event (the generator is kick-started
  before the 200 is sent);
- once the request has a slot and its first output: `data: {...}` with delta
  `{"reasoning_content": null, "role": "assistant", "content": ""}`;
- text deltas: `{"reasoning_content": "..."}` for the trace (with a reasoning parser and
  separate_reasoning), `{"reasoning_content": null, "content": "..."}` for the answer; every
  choice carries logprobs, finish_reason and matched_stop (null until the end);
- a last choice chunk with delta `{"reasoning_content": null}`, the finish_reason and
  matched_stop;
- with stream_options.include_usage: a chunk with `"choices": []` and the full usage;
- `data: [DONE]`.
The concatenated deltas are exactly the non-streaming message's texts (the streaming
reasoning detector neither strips nor reorders). SGLang sends a delta per detokenizer step;
the simulator groups up to STEP_TOKENS tokens per delta to keep long traces cheap. A client
that disconnects frees the slot, as SGLang aborts the request.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

import anyio

from .chat_completion import ChatHandler, ChatRequest, Completion

STEP_TOKENS = 16


def _sse(obj: dict[str, Any]) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n\n"


def _chunk(done: Completion, delta: dict[str, Any], finish_reason: str | None = None,
           matched_stop: int | None = None) -> str:
    return _sse({"id": done.rid, "object": "chat.completion.chunk", "created": done.created,
                 "model": done.model,
                 "choices": [{"index": 0, "delta": delta, "logprobs": None,
                              "finish_reason": finish_reason, "matched_stop": matched_stop}]})


def _pieces(text: str, step: int) -> list[str]:
    """`text` cut every `step` words; the pieces join back to exactly `text`."""
    if not text:
        return []
    words = text.split(" ")
    return [" ".join(words[i:i + step]) + (" " if i + step < len(words) else "")
            for i in range(0, len(words), step)]


async def stream_completion(handler: ChatHandler, req: ChatRequest,
                            done: Completion) -> AsyncIterator[str]:
    reasoning = _pieces(done.reasoning_content or "", STEP_TOKENS)
    content = _pieces(done.content, STEP_TOKENS)
    steps = max(1, len(reasoning) + len(content))
    pause = handler.decode_seconds(done.completion_tokens) / steps
    async with handler.slots.slot(done.prompt_tokens + done.completion_tokens):
        yield _chunk(done, {"reasoning_content": None, "role": "assistant", "content": ""})
        for piece in reasoning:
            if pause > 0:
                await anyio.sleep(pause)
            yield _chunk(done, {"reasoning_content": piece})
        for piece in content:
            if pause > 0:
                await anyio.sleep(pause)
            yield _chunk(done, {"reasoning_content": None, "content": piece})
        while handler.faults.is_stalled:
            await anyio.sleep(0.05)            # the slot stays taken, as in a stuck batch
    handler.slots.finished(done.prompt_tokens, done.completion_tokens)
    handler.on_finished(done.prompt_tokens, done.completion_tokens, True)
    yield _chunk(done, {"reasoning_content": None}, done.finish_reason, done.matched_stop)
    if req.include_usage:
        yield _sse({"id": done.rid, "object": "chat.completion.chunk",
                    "created": done.created, "model": done.model, "choices": [],
                    "usage": done.usage()})
    yield "data: [DONE]\n\n"
