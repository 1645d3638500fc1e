"""One streamed chat completion, assembled from its server-sent events into the answer the
non-streamed request would have given.

SGLang 0.5.23's stream (`sglang/srt/entrypoints/openai/serving_chat.py`
_generate_chat_stream and _generate_stream_content, chunks built by
`sglang/srt/entrypoints/openai/sse_utils.py` build_sse_content):
- `data: {...}` chunks whose choices[0].delta carries `reasoning_content` (the trace, split
  by the reasoning parser) or `content` (the answer) text, null when absent; the first chunk
  has role "assistant" and content "";
- a chunk with the finish_reason ("stop", "length", or "abort" after /abort_request);
- with the headers of supervisor/sglang/token_ids.py, one chunk with `"choices": []` and an
  `sglext` object: the prompt's and the output's exact token ids;
- with stream_options.include_usage a chunk with `"choices": []` and the whole usage (with
  continuous_usage_stats each text chunk carries the running usage too);
- an error after the stream began (a request aborted with a status code: timeout, OOM,
  validation) is `data: {"error": {"object": "error", "message": ..., "code": N}}`
  (serving_base.py create_streaming_error_response), then the usage chunk, then
- `data: [DONE]`.
Errors before the stream begins are a plain JSON error response, as without streaming.

Each chunk's JSON is parsed by orjson, from the bytes as read: at SGLang's default
`--stream-interval 1` every generated token is a chunk, and the standard library's parser
(its encoding sniff, decode and scan in Python-called steps) was the largest single share of
the daemon's CPU per chunk (benchmarks/bench_stream_cpu.py). orjson's errors are ValueErrors
too, invalid UTF-8 included, so a line it cannot read is still `nonsense`.

The assembled answer goes through `completion.classify_answer`, the one place that decides
done / retry / failed, so the breaker and the quality gate see what they would have seen
without streaming. A streamed error chunk is judged as the HTTP error of its code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from supervisor.dispatch.completion import Answer, Retryable, classify_answer, classify_response
from supervisor.sglang.token_ids import sglext_ids

_DATA = b"data:"
_DONE = b"[DONE]"
_loads = orjson.loads


@dataclass
class StreamAnswer:
    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    saw_reasoning: bool = False          # a reasoning_content string arrived (even "")
    finish_reason: Any = None
    usage: dict[str, Any] | None = None  # the include_usage chunk
    running_tokens: int | None = None    # continuous_usage_stats: completion tokens so far
    text_chunks: int = 0                 # chunks that carried text
    error: tuple[int, str] | None = None  # a streamed error chunk: its code and raw JSON
    nonsense: str | None = None          # a line we could not read
    ended: bool = False                  # data: [DONE] seen
    last_payload: bytes = b""            # the last data line's JSON, as it came
    input_ids: list[int] | None = None   # the sglext chunk's: the ids the request ran on
    output_ids: list[int] | None = None  # ... and the ids it sampled

    @property
    def last_line(self) -> str:
        return self.last_payload.decode("utf-8", "replace")

    @property
    def tokens(self) -> int:
        """Completion tokens generated so far: the server's count when it sends one, else the
        number of chunks that carried text (SGLang sends one per decode step by default)."""
        if self.usage is not None:
            value = self.usage.get("completion_tokens")
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        if self.running_tokens is not None:
            return self.running_tokens
        return self.text_chunks

    @property
    def counted(self) -> bool:
        """`tokens` is the server's own count, not the number of chunks."""
        return self.usage is not None or self.running_tokens is not None

    def feed(self, line: bytes | str) -> tuple[str | None, str | None] | None:
        """One line of the event stream (bytes as read: json reads UTF-8 itself, so only
        the text the answer keeps is ever decoded). Returns (reasoning, content) when the
        chunk carried generated text (a token arrived), else None."""
        if line.__class__ is not bytes:
            line = line.encode() if isinstance(line, str) else bytes(line)
        if not line.startswith(_DATA):
            return None                  # blank separators, "event:" names, ": comments"
        payload = line[5:].strip()       # len(_DATA)
        if payload == _DONE:
            self.ended = True
            return None
        self.last_payload = payload
        try:
            obj = _loads(payload)
        except ValueError:               # invalid UTF-8 included
            self.nonsense = self.last_line
            return None
        if obj.__class__ is not dict:
            self.nonsense = self.last_line
            return None
        err = obj.get("error")
        if err is not None or obj.get("object") == "error":
            body = err if isinstance(err, dict) else obj
            code = body.get("code")
            self.error = (code if isinstance(code, int) and not isinstance(code, bool)
                          and 400 <= code <= 599 else 500, self.last_line)
            return None
        usage = obj.get("usage")
        choices = obj.get("choices")
        if not choices:
            if isinstance(usage, dict):
                self.usage = usage
            ids = sglext_ids(obj)
            if ids is not None:
                self.input_ids, self.output_ids = ids
            return None
        try:
            choice = choices[0]
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content")
            content = delta.get("content")
            finish = choice.get("finish_reason")
        except (AttributeError, IndexError, KeyError, TypeError):
            self.nonsense = self.last_line
            return None
        if finish is not None:
            self.finish_reason = finish
        if isinstance(usage, dict):
            running = usage.get("completion_tokens")
            if isinstance(running, int) and not isinstance(running, bool):
                self.running_tokens = running
        got = False
        if isinstance(reasoning, str):
            self.saw_reasoning = True
            if reasoning:
                self.reasoning.append(reasoning)
                got = True
        else:
            reasoning = None
        if isinstance(content, str) and content:
            self.content.append(content)
            got = True
        else:
            content = None
        if not got:
            return None
        self.text_chunks += 1
        return reasoning, content

    def answer(self, finish_reason: str | None = None) -> Answer:
        """What the stream amounts to, judged as the non-streamed answer would be.
        `finish_reason` overrides the server's (a loop we aborted is recorded as cut off)."""
        if self.error is not None:
            return classify_response(*self.error)
        if self.nonsense is not None:
            return classify_response(200, self.nonsense)
        finish = finish_reason if finish_reason is not None else self.finish_reason
        if finish is None:
            return Retryable(f"the stream ended without a finish_reason (last chunk: "
                             f"{self.last_line[:200]!r})", "nonsense answer")
        usage = self.usage
        if usage is None:
            # No usage chunk (a server that ignores include_usage): the running count.
            usage = {"completion_tokens": self.tokens}
        data = {"choices": [{"index": 0, "finish_reason": finish, "message": {
            "role": "assistant", "content": "".join(self.content),
            "reasoning_content": "".join(self.reasoning) if self.saw_reasoning else None}}],
            "usage": usage}
        return classify_answer(data, self.last_line)
