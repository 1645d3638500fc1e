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
- with stream_options.continuous_usage_stats: each text chunk also carries the usage so far
  (completion_tokens counting this chunk's tokens; _generate_stream_content);
- with stream_options.include_usage: a chunk with `"choices": []` and the full usage;
- `data: [DONE]`.
A request aborted by the scheduler with an error status (the error share, faults.py) ends
after the text sent so far with `data: {"error": {"object": "error", "message": ...,
"type": <the status's name, e.g. "INTERNAL_SERVER_ERROR">, "param": null, "code": <its
value>}}` and no finish chunk; the usage chunk (with include_usage) and `data: [DONE]`
follow (serving_chat.py _generate_chat_stream, `error_aborted`; the chunk is
serving_base.py create_streaming_error_response with code.name and code.value).
The concatenated deltas are exactly the non-streaming message's texts (the streaming
reasoning detector neither strips nor reorders). SGLang sends a delta per detokenizer step;
the simulator groups up to STEP_TOKENS tokens per delta to keep long traces cheap
(`--sim-stream-step`), or with step 0 sends the whole trace and the whole answer as one delta
each, as SGLang does for a reader that lags (tokenizer_manager.py
_coalesce_streaming_chunks: the deltas queued since the last read are joined). A client
that disconnects frees the slot, as SGLang aborts the request; /abort_request ends the
stream early with finish_reason "abort".
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

import anyio

from .batch_slots import Aborted
from .chat_completion import ERRORED, SCHEDULER_OOM_ABORT, ChatHandler, ChatRequest, Completion
from .reasoning_split import usage

STEP_TOKENS = 16
# HTTPStatus.INTERNAL_SERVER_ERROR as the streamed error chunk names it (code.name, code.value).
_OOM_ERROR = {"error": {"object": "error", "message": SCHEDULER_OOM_ABORT,
                        "type": "INTERNAL_SERVER_ERROR", "param": None, "code": 500}}


def _sse(obj: dict[str, Any]) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n\n"


def _chunk(done: Completion, delta: dict[str, Any], finish_reason: str | None = None,
           matched_stop: int | None = None, running: dict[str, Any] | None = None) -> str:
    obj = {"id": done.rid, "object": "chat.completion.chunk", "created": done.created,
           "model": done.model,
           "choices": [{"index": 0, "delta": delta, "logprobs": None,
                        "finish_reason": finish_reason, "matched_stop": matched_stop}]}
    if running is not None:
        obj["usage"] = running
    return _sse(obj)


def _pieces(text: str, step: int) -> list[str]:
    """`text` cut every `step` words; the pieces join back to exactly `text`."""
    if not text:
        return []
    words = text.split(" ")
    return [" ".join(words[i:i + step]) + (" " if i + step < len(words) else "")
            for i in range(0, len(words), step)]


async def stream_completion(handler: ChatHandler, req: ChatRequest,
                            done: Completion) -> AsyncIterator[str]:
    # Coalesced (step 0): one delta for the trace and one for the answer, as SGLang sends
    # what a slow reader left queued (a stuck or failing request keeps its steps: it stops
    # halfway, after some text).
    step = handler.opts.stream_step or (STEP_TOKENS if done.stuck or done.errors else 1 << 30)
    reasoning = _pieces(done.reasoning_content or "", step)
    content = _pieces(done.content, step)
    steps = max(1, len(reasoning) + len(content))
    # Each delta is paced by the decode meter, so a change of speed (a throughput collapse)
    # slows the deltas still to come.
    step_tokens = done.completion_tokens / steps
    final = done
    with handler.inflight.track(done.rid) as flight:
        try:
            async with handler.slots.slot(done.prompt_tokens + done.completion_tokens,
                                          abort=flight.aborted):
                yield _chunk(done, {"reasoning_content": None, "role": "assistant",
                                    "content": ""})
                sent = 0
                deltas = [("reasoning_content", p) for p in reasoning] + \
                    [("content", p) for p in content]
                halfway = len(deltas) // 2 if done.stuck or done.errors else -1
                for i, (key, piece) in enumerate(deltas):
                    if i == halfway and done.errors:
                        final = done.failed(sent)
                        break
                    if i == halfway:
                        await flight.aborted.wait()    # stuck halfway until aborted
                    await handler.meter.step(step_tokens, flight.aborted)
                    if flight.aborted.is_set():
                        break
                    delta = {"reasoning_content": piece} if key == "reasoning_content" \
                        else {"reasoning_content": None, "content": piece}
                    sent += len(piece.split())
                    running = None
                    if req.continuous_usage:
                        running = usage(done.prompt_tokens, min(sent, done.completion_tokens),
                                        min(sent, done.reasoning_tokens))
                    yield _chunk(done, delta, running=running)
                while handler.faults.is_stalled and not flight.aborted.is_set():
                    await anyio.sleep(0.05)        # the slot stays taken, as in a stuck batch
                if flight.aborted.is_set():
                    final = done.cut(sent, queued=False)
        except Aborted:
            final = done.cut(0, queued=True)
            yield _chunk(done, {"reasoning_content": None, "role": "assistant", "content": ""})
    handler.slots.finished(final.prompt_tokens, final.completion_tokens)
    handler.on_finished(final.prompt_tokens, final.completion_tokens, True)
    if final.finish_reason == ERRORED:
        yield _sse(_OOM_ERROR)
    else:
        yield _chunk(done, {"reasoning_content": None}, final.finish_reason,
                     final.matched_stop)
    if req.include_usage:
        yield _sse({"id": done.rid, "object": "chat.completion.chunk",
                    "created": done.created, "model": done.model, "choices": [],
                    "usage": final.usage()})
    yield "data: [DONE]\n\n"
