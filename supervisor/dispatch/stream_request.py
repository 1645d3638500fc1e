"""One chat completion streamed under our own request id, watched while it decodes.

The request goes to SGLang's OpenAI chat route with `stream: true` and `rid` (the reasoning
parser keeps splitting the trace server-side); `POST /abort_request {"rid": R}` stops exactly
that request (`sglang/srt/entrypoints/http_server.py` abort_request, TokenizerManager
.abort_request in `sglang/srt/managers/tokenizer_manager.py`), and the stream then ends with
finish_reason "abort" and the usage of what was produced. While the chunks arrive:

- stall: no token for `stall_s` -> abort, and the answer is a retry (kind "stall");
- loop: the streamed loop watch (stream_loop_watch.py) confirms a loop -> abort, read the
  stream's end for the exact token count (at most LOOP_DRAIN_S), and the answer is the text
  so far recorded as cut off (finish_reason "length", flagged loop);
- the whole request past `timeout_s` -> abort, a retry (kind "timeout"), as without streaming.
A connection that fails is reported as gone (the dispatcher decides, as for a plain POST).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import anyio
import httpx

from supervisor.dispatch.completion import Answer, Retryable, classify_response
from supervisor.dispatch.stream_answer import StreamAnswer
from supervisor.dispatch.stream_loop_watch import LoopVerdict, StreamLoopWatch

log = logging.getLogger("supervisor.dispatch")

ABORT_TIMEOUT_S = 5.0    # /abort_request is answered by the tokenizer manager at once
LOOP_DRAIN_S = 10.0      # after aborting a loop, for the final usage (SGLang: one step)
_HEADERS = {"content-type": "application/json"}


@dataclass
class Streamed:
    answer: Answer | None            # None: the connection failed (see `gone`)
    stream: StreamAnswer
    gone: str | None = None
    stalled: bool = False
    loop: LoopVerdict | None = None
    aborted: bool = False            # we sent /abort_request for it

    @property
    def tokens(self) -> int:
        return self.stream.tokens


async def abort_request(client: httpx.AsyncClient, base_url: str, rid: str) -> bool:
    """Ask the server to stop `rid`; false when it could not be told (already gone)."""
    try:
        resp = await client.post(base_url + "/abort_request",
                                 content=b'{"rid": ' + _json_str(rid) + b', "abort_all": false}',
                                 headers=_HEADERS, timeout=ABORT_TIMEOUT_S)
    except httpx.HTTPError as exc:
        log.warning("abort of %s at %s failed: %s: %s", rid, base_url, type(exc).__name__, exc)
        return False
    return resp.status_code == 200


def _json_str(text: str) -> bytes:
    return json.dumps(text, ensure_ascii=False).encode()


async def stream_chat(client: httpx.AsyncClient, base_url: str, body: bytes, rid: str, *,
                      stall_s: float, timeout_s: float, watch: StreamLoopWatch | None,
                      sa: StreamAnswer | None = None) -> Streamed:
    """`sa` may be passed in so a caller cancelled meanwhile still knows the tokens so far."""
    sa = sa if sa is not None else StreamAnswer()
    out = Streamed(None, sa)
    now = anyio.current_time()
    give_up_at = now + timeout_s
    try:
        async with client.stream("POST", base_url + "/v1/chat/completions", content=body,
                                 headers=_HEADERS, timeout=timeout_s) as resp:
            if resp.status_code != 200 or not resp.headers.get(
                    "content-type", "").startswith("text/event-stream"):
                # An error before the stream began (SGLang sends it as plain JSON), or a
                # server that answers a streamed request in one piece: judged as unstreamed.
                text = (await resp.aread()).decode("utf-8", "replace")
                out.answer = classify_response(resp.status_code, text)
                return out
            draining = False
            with anyio.CancelScope(deadline=min(now + stall_s, give_up_at)) as scope:
                async for line in resp.aiter_lines():
                    got = sa.feed(line)
                    if got is None:
                        if sa.error is not None or sa.nonsense is not None:
                            break
                        continue
                    if draining:
                        continue
                    # A token: the stall clock starts again.
                    scope.deadline = min(anyio.current_time() + stall_s, give_up_at)
                    if watch is not None and watch.feed(
                            got[0], got[1], generated_tokens=sa.running_tokens) is not None:
                        out.loop = watch.verdict
                        out.aborted = True
                        draining = True
                        scope.deadline = anyio.current_time() + LOOP_DRAIN_S
                        await abort_request(client, base_url, rid)
            if out.loop is not None:
                out.answer = sa.answer(finish_reason="length")
                return out
            if scope.cancelled_caught:
                out.aborted = True
                if anyio.current_time() >= give_up_at:
                    out.answer = Retryable(f"no answer within {timeout_s:g} s (streamed)",
                                           "timeout")
                else:
                    out.stalled = True
                    out.answer = Retryable(
                        f"stalled: no token for {stall_s:g} s after {sa.tokens} tokens "
                        f"(aborted as {rid})", "stall")
                # The stream's reader died with the cancelled read, so the tokens it cost
                # are the running count so far (exact with continuous_usage_stats).
                await abort_request(client, base_url, rid)
                return out
            out.answer = sa.answer()
            return out
    except httpx.TimeoutException as exc:
        out.answer = Retryable(f"no answer within {timeout_s:g} s ({type(exc).__name__})",
                               "timeout")
    except httpx.TransportError as exc:
        out.gone = f"{type(exc).__name__}: {exc}"
    return out
