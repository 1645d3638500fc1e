"""POST /v1/tokenize (/tokenize) and /v1/detokenize (/detokenize), SGLang 0.5.23's shapes,
with the simulated model's tokenizer (toy_tokenizer.py).

`sglang/srt/entrypoints/openai/serving_tokenize.py` (models in `protocol.py`
TokenizeRequest ~1744, TokenizeResponse ~1796, DetokenizeRequest ~1804):
- tokenize: `{"prompt": str | [str]}` or `{"messages": [...]}` (rendered as for a chat
  completion: the same ids the chat route's `sglext.input_ids` gives) -> `{"tokens",
  "count", "max_model_len"}`; a list of prompts gives a list of each;
- detokenize: `{"tokens": [int] | [[int]], "skip_special_tokens": true}` -> `{"text"}`
  (a list of texts for a list of lists; `[]` gives "");
- a refusal is SGLang's error body, 400 (serving_base.py create_error_response).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .chat_completion import error_body
from .options import SimOptions
from .toy_tokenizer import TokenError, detokenize, encode_prompt, encode_text


def _refuse(message: str) -> JSONResponse:
    return JSONResponse(error_body(message), status_code=400)


async def _body(request: Request) -> dict[str, Any] | JSONResponse:
    try:
        body = json.loads(await request.body())
    except ValueError as exc:
        return JSONResponse(error_body(f"JSON decode error: {exc}", kind="Bad Request"),
                            status_code=400)
    if not isinstance(body, dict):
        return JSONResponse(error_body("request body must be a JSON object",
                                       kind="Bad Request"), status_code=400)
    return body


async def tokenize(opts: SimOptions, request: Request) -> Response:
    body = await _body(request)
    if isinstance(body, JSONResponse):
        return body
    messages, prompt = body.get("messages"), body.get("prompt")
    try:
        if messages is not None:
            if not isinstance(messages, list) or not messages:
                return _refuse("messages must be a non-empty list")
            if body.get("continue_final_message"):
                return _refuse("continue_final_message is not simulated on /v1/tokenize")
            kwargs = body.get("chat_template_kwargs") or {}
            # Qwen3's template: thinking unless enable_thinking is false.
            thinking = not (isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False)
            tokens: Any = encode_prompt(messages, thinking=thinking)
            count: Any = len(tokens)
        elif isinstance(prompt, str):
            tokens = encode_text(prompt)
            count = len(tokens)
        elif isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            tokens = [encode_text(p) for p in prompt]
            count = [len(t) for t in tokens]
        else:
            return _refuse(f"Invalid prompt type: {type(prompt)}. Expected str or List[str].")
    except TokenError as exc:
        return _refuse(str(exc))
    return JSONResponse({"tokens": tokens, "count": count,
                         "max_model_len": opts.context_length})


async def detokenize_route(request: Request) -> Response:
    body = await _body(request)
    if isinstance(body, JSONResponse):
        return body
    tokens = body.get("tokens")
    skip = body.get("skip_special_tokens", True) is not False
    try:
        if isinstance(tokens, list) and not tokens:
            return JSONResponse({"text": ""})
        if isinstance(tokens, list) and all(isinstance(t, list) for t in tokens):
            return JSONResponse({"text": [detokenize(t, skip_special_tokens=skip)
                                          for t in tokens]})
        if isinstance(tokens, list):
            return JSONResponse({"text": detokenize(tokens, skip_special_tokens=skip)})
    except TokenError as exc:
        return _refuse(str(exc))
    return _refuse(f"Invalid tokens type: {type(tokens)}. Expected List[int] or "
                   "List[List[int]].")

