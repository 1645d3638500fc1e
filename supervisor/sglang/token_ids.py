"""The exact token ids SGLang 0.5.23 sampled, as a streamed chat completion returns them, and
`/detokenize`, the server's own decoding of ids back to text.

- Asked for per request by two headers (`sglang/srt/entrypoints/openai/serving_chat.py`
  ~1283-1289: `x-sglext-return-input-ids: 1`, `x-sglext-return-output-ids: 1`), the stream
  carries one extra chunk before the usage chunk and `[DONE]`:
  `{"choices": [], "sglext": {"input_ids": [...], "output_ids": [[...]]}}` (~2715-2770): the
  prompt's ids as the chat template rendered them (or the `input_ids` the request sent) and
  the sampled ids, one list per choice. They come after an `/abort_request` too, never after
  an error abort (`error_aborted`, ~2716).
- `POST /detokenize {"tokens": [...]}` answers `{"text": ...}` (`sglang/srt/entrypoints/
  openai/serving_tokenize.py` OpenAIServingDetokenize; route in http_server.py ~1925-1935),
  decoded by the server's tokenizer with `skip_special_tokens` true by default, as the chat
  route decodes its own output. A continued answer's text is decoded here from all its ids
  at once: gluing the parts' texts is not the same text (a part may end inside a multi-byte
  character, which each part's decoding turns into U+FFFD).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

RETURN_IDS_HEADERS = {"x-sglext-return-input-ids": "1", "x-sglext-return-output-ids": "1"}
DETOKENIZE_PATH = "/detokenize"
JSON_HEADERS = {"content-type": "application/json"}


class DetokenizeError(Exception):
    """The server could not decode the ids (one line saying why)."""


def _id_list(value: Any) -> list[int] | None:
    if not isinstance(value, list):
        return None
    for v in value:
        if v.__class__ is not int or v < 0:
            return None
    return value


def sglext_ids(chunk: dict[str, Any]) -> tuple[list[int] | None, list[int] | None] | None:
    """(input_ids, output_ids of the first choice) from a stream chunk that has an `sglext`
    object, None when it has none. An id list that is not a list of token ids is None."""
    ext = chunk.get("sglext")
    if not isinstance(ext, dict):
        return None
    outputs = ext.get("output_ids")
    first = outputs[0] if isinstance(outputs, list) and outputs else None
    return _id_list(ext.get("input_ids")), _id_list(first)


async def detokenize(client: aiohttp.ClientSession, base_url: str, ids: list[int],
                     timeout: aiohttp.ClientTimeout) -> str:
    """The text of `ids` as the server decodes it; DetokenizeError when it cannot (the
    caller's wire errors pass through: the dispatch path judges them)."""
    body = json.dumps({"tokens": ids}, separators=(",", ":")).encode()
    async with client.post(base_url + DETOKENIZE_PATH, data=body,
                           headers=JSON_HEADERS,
                           timeout=timeout) as resp:
        raw = await resp.read()
        if resp.status != 200:
            raise DetokenizeError(f"{DETOKENIZE_PATH} answered HTTP {resp.status}: "
                                  f"{raw[:200].decode('utf-8', 'replace')}")
    try:
        text = json.loads(raw).get("text")
    except (ValueError, AttributeError) as exc:
        raise DetokenizeError(f"{DETOKENIZE_PATH} answered nonsense: {exc}") from None
    if not isinstance(text, str):
        raise DetokenizeError(f"{DETOKENIZE_PATH} answered no text: {raw[:200]!r}")
    return text
