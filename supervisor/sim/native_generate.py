"""SGLang's native POST /generate (non-streaming) and POST /abort_request, 0.5.23 shapes.

/generate (`sglang/srt/entrypoints/http_server.py` generate_request; GenerateReqInput in
`sglang/srt/managers/io_struct.py`): {"text", "sampling_params": {"max_new_tokens" (default
128, `sglang/srt/sampling/sampling_params.py`)}, "rid"} → {"text", "output_ids", "meta_info":
{id, finish_reason, prompt_tokens, weight_version, num_retractions, reasoning_tokens,
completion_tokens, cached_tokens, e2e_latency}}. finish_reason is the scheduler's to_json
(`sglang/srt/managers/schedule_batch.py`): {"type": "stop", "matched": <token id>},
{"type": "length", "length": N}, or for an abort while running {"type": "abort", "message":
"Aborted", "status_code": null, "err_type": null}; aborted while queued, the tokenizer
manager answers {"type": "abort", "message": "Abort in waiting queue"} with a shorter
meta_info. Errors are {"error": {"message"}} with 400 (http_server.py _create_error_response).
Plain text has no chat template, so the simulated model does not think here.

/abort_request {"rid", "abort_all"} → 200 with an empty body (see inflight.py).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .chat_completion import EOS_TOKEN_ID, BadRequest, ChatHandler, Completion, check_lengths
from .filler_text import filler
from .output_plan import plan_output, prompt_digest, text_offset

DEFAULT_MAX_NEW_TOKENS = 128


def _error(message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status_code=400)


def _finish_reason(done: Completion, queued: bool) -> dict[str, Any]:
    if done.finish_reason == "abort":
        if queued:
            return {"type": "abort", "message": "Abort in waiting queue"}
        return {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    if done.finish_reason == "stop":
        return {"type": "stop", "matched": EOS_TOKEN_ID}
    return {"type": "length", "length": done.completion_tokens}


def _output_ids(done: Completion, seed: int) -> list[int]:
    """Stand-in token ids, one per completion token (the stop token last on a stop)."""
    ids = [(seed * 31 + i * 7919) % 151000 for i in range(done.completion_tokens)]
    if ids and done.finish_reason == "stop":
        ids[-1] = EOS_TOKEN_ID
    return ids


async def generate(handler: ChatHandler, request: Request) -> Response:
    started = time.monotonic()
    try:
        body = json.loads(await request.body())
    except ValueError as exc:
        return _error(f"JSON decode error: {exc}")
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        return _error("text: a single prompt string is what the simulator serves")
    if body.get("stream"):
        return JSONResponse({"error": {"message": "streaming /generate is not simulated"}},
                            status_code=501)
    params = body.get("sampling_params") or {}
    max_new = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS) \
        if isinstance(params, dict) else DEFAULT_MAX_NEW_TOKENS
    if max_new is not None and (isinstance(max_new, bool) or not isinstance(max_new, int)
                                or max_new < 0):
        return _error(f"max_new_tokens must be a non-negative integer, got {max_new!r}")
    rid = body.get("rid") or uuid.uuid4().hex
    if not isinstance(rid, str):
        return _error("rid: a single request id (a string) is what the simulator serves")
    if rid in handler.inflight:
        return _error(f"Duplicate request ID detected: {rid}")
    opts = handler.opts
    text = body["text"]
    prompt_tokens = max(1, len(text) // 4)
    try:
        max_new = check_lengths(opts, prompt_tokens, max_new, chat=False)
    except BadRequest as exc:
        return _error(str(exc))
    digest = prompt_digest(text, opts.seed)
    plan = plan_output(digest, max_tokens=max_new, thinking=False,
                       room=opts.context_length - prompt_tokens)
    answer = filler(plan.completion_tokens, text_offset(digest))
    done = Completion(rid=rid, created=int(time.time()), model=opts.model_name, content=answer,
                      reasoning_content=None, finish_reason=plan.finish_reason,
                      matched_stop=EOS_TOKEN_ID if plan.finish_reason == "stop" else None,
                      prompt_tokens=prompt_tokens, completion_tokens=plan.completion_tokens,
                      reasoning_tokens=0, raw=answer,
                      budget=opts.context_length - prompt_tokens if max_new is None else max_new)
    done = await handler.decode(done)
    queued = done.finish_reason == "abort" and done.prompt_tokens == 0
    meta: dict[str, Any] = {"id": rid, "finish_reason": _finish_reason(done, queued)}
    if queued:
        meta.update({"weight_version": "default",
                     "e2e_latency": time.monotonic() - started, "completion_tokens": 0})
    else:
        meta.update({"prompt_tokens": done.prompt_tokens, "weight_version": "default",
                     "num_retractions": 0, "reasoning_tokens": 0,
                     "completion_tokens": done.completion_tokens, "cached_tokens": 0,
                     "e2e_latency": time.monotonic() - started})
    return JSONResponse({"text": done.content, "output_ids": _output_ids(done, opts.seed),
                         "meta_info": meta})


async def abort_request(handler: ChatHandler, request: Request) -> Response:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError as exc:
        return _error(f"JSON decode error: {exc}")
    if not isinstance(body, dict):
        return _error("body must be a JSON object")
    rid = body.get("rid") or ""
    rid = rid if isinstance(rid, str) else ""
    abort_all = bool(body.get("abort_all"))
    # Sent to the scheduler (and counted) only for a request in flight, or all of them.
    if (abort_all or (rid and rid in handler.inflight)) and handler.on_abort is not None:
        handler.on_abort()
    handler.inflight.abort(rid, abort_all)
    return Response(status_code=200)
