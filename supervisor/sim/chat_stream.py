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
- with the `x-sglext-return-input-ids: 1` / `x-sglext-return-output-ids: 1` headers: a
  chunk `{..., "choices": [], "usage": null, "sglext": {"input_ids": [...], "output_ids":
  [[...]]}}` (none after an error abort);
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
import re
from collections.abc import AsyncIterator
from typing import Any

from .batch_slots import Aborted
from .chat_completion import (
    ERRORED,
    SCHEDULER_OOM_ABORT,
    ChatHandler,
    ChatRequest,
    Completion,
    error_body,
)
from .decode_meter import StreamSchedule
from .reasoning_split import usage

STEP_TOKENS = 16
_WORD = re.compile(r"\s*\S+")
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


def _tokens(text: str) -> list[str]:
    """The text cut as its tokens are: each word with the whitespace before it (a cut stream
    has sent exactly the text of the tokens it sampled)."""
    words = _WORD.findall(text)
    tail = text[sum(map(len, words)):]
    if tail:                          # whitespace after the last word (a trace's "\n")
        words = words[:-1] + [words[-1] + tail] if words else [tail]
    return words


def _sends(reasoning: str, content: str, step: int) -> list[tuple[str, str, int]]:
    """The chunks of one stream: (reasoning piece, content piece, tokens so far), one per
    send. SGLang's output streamer (`sglang/srt/managers/scheduler_components/
    output_streamer.py`:444-469) sends the first token at once, then whenever `step` tokens
    are unsent, then the rest at the end: 9 tokens at 4 are sent at 1, 5 and 9. A send that
    crosses from the trace into the answer is two deltas, as serving_chat.py yields the
    reasoning text and the normal text of one output separately. Step 0 (a lagging reader,
    coalesced): the whole trace as one send and the whole answer as another."""
    r_words = _tokens(reasoning)
    c_words = _tokens(content)
    words = [("r", w) for w in r_words] + [("c", w) for w in c_words]
    if not words:
        return []
    if step <= 0:
        cuts = [n for n in (len(r_words), len(words)) if n > 0]
    else:
        cuts = [1] + list(range(1 + step, len(words), step)) + [len(words)]
        cuts = sorted(set(c for c in cuts if c <= len(words)))
    sends, at = [], 0
    for cut in cuts:
        parts: dict[str, list[str]] = {"r": [], "c": []}
        for kind, word in words[at:cut]:
            parts[kind].append(word)
        sends.append(("".join(parts["r"]), "".join(parts["c"]), cut))
        at = cut
    return sends


async def stream_completion(handler: ChatHandler, req: ChatRequest,
                            done: Completion) -> AsyncIterator[str]:
    # Coalesced (step 0): one delta for the trace and one for the answer, as SGLang sends
    # what a slow reader left queued (a stuck or failing request keeps its steps: it stops
    # halfway, after some text).
    if done.refusal is not None:
        # Refused by the scheduler (too long for the KV pool) after the 200 went out: an
        # error chunk, no role chunk, no finish chunk (serving_chat.py
        # _generate_chat_stream: an abort with a status code; `error_aborted`).
        yield _sse({"error": error_body(done.refusal, 400, kind="BAD_REQUEST")})
        if req.include_usage:
            yield _sse({"id": done.rid, "object": "chat.completion.chunk",
                        "created": done.created, "model": done.model, "choices": [],
                        "usage": usage(done.prompt_tokens, 0, 0)})
        yield "data: [DONE]\n\n"
        return
    step = handler.opts.stream_step or (STEP_TOKENS if done.stuck or done.errors else 0)
    sends = _sends(done.reasoning_content or "", done.content, step)
    # Each send is paced by the decode meter, so a change of speed (a throughput collapse,
    # a bigger batch) slows the sends still to come; the tokens are spread evenly over them.
    per_word = done.completion_tokens / max(1, sends[-1][2] if sends else 1)
    final = done
    sent = 0
    schedule = StreamSchedule() if handler.opts.stream_on_schedule else None
    with handler.inflight.track(done.rid) as flight:
        try:
            async with handler.slots.slot(done.seat(), abort=flight.aborted) as seat:
                # One event to wake a send: the seat's retraction, which an abort sets too.
                flight.on_abort = lambda: seat.retracted.set()
                yield _chunk(done, {"reasoning_content": None, "role": "assistant",
                                    "content": ""})
                halfway = len(sends) // 2 if done.stuck or done.errors else -1
                i = 0
                while final is done and i < len(sends):
                    r_piece, c_piece, upto = sends[i]
                    if i == halfway and done.errors:
                        final = done.failed(sent)
                        break
                    if i == halfway:
                        await flight.aborted.wait()    # stuck halfway until aborted
                    with handler.slots.decoding(seat):
                        whole = await handler.meter.step((upto - sent) * per_word,
                                                         seat.retracted, schedule)
                    if flight.aborted.is_set():
                        break
                    if not whole:
                        # Retracted: silent in the queue, then on from where it was.
                        handler.slots.pool.set_generated(seat, sent * per_word)
                        await handler.slots.readmit(seat, flight.aborted)
                        continue
                    sent = upto
                    handler.slots.pool.set_generated(seat, sent * per_word)
                    running = None
                    if req.continuous_usage:
                        running = usage(done.prompt_tokens, min(sent, done.completion_tokens),
                                        min(sent, done.reasoning_tokens))
                    if r_piece:
                        yield _chunk(done, {"reasoning_content": r_piece}, running=running)
                    if c_piece:
                        yield _chunk(done, {"reasoning_content": None, "content": c_piece},
                                     running=running)
                    i += 1
                if flight.aborted.is_set():
                    final = done.cut(sent, queued=False)
        except Aborted:
            final = done.cut(sent, queued=sent == 0)
            if sent == 0:
                yield _chunk(done, {"reasoning_content": None, "role": "assistant",
                                    "content": ""})
        except BaseException:
            # The client went away: SGLang aborts the request (and counts it).
            handler.on_disconnect()
            raise
    handler.slots.finished(final.prompt_tokens, final.completion_tokens)
    handler.on_finished(final.prompt_tokens, final.completion_tokens, True)
    if final.finish_reason == ERRORED:
        yield _sse(_OOM_ERROR)
    else:
        yield _chunk(done, {"reasoning_content": None}, final.finish_reason,
                     final.matched_stop)
    ext = final.sglext(req.wanted)
    if ext is not None:
        # The ids asked for, one chunk before the usage (serving_chat.py ~2716-2770), after
        # an /abort_request too, not after an error abort.
        yield _sse({"id": done.rid, "object": "chat.completion.chunk",
                    "created": done.created, "model": done.model, "choices": [],
                    "usage": None, "sglext": ext})
    if req.include_usage:
        yield _sse({"id": done.rid, "object": "chat.completion.chunk",
                    "created": done.created, "model": done.model, "choices": [],
                    "usage": final.usage()})
    yield "data: [DONE]\n\n"
