"""One chat completion streamed under our own request id, watched while it decodes.

The request goes to SGLang's OpenAI chat route with `stream: true` and `rid` (the reasoning
parser keeps splitting the trace server-side); an abort by that id stops exactly that request
(supervisor/sglang/abort.py), and the stream then ends with finish_reason "abort" and the
usage of what was produced. While the chunks arrive:

- stall: no token for `stall_s` while the server makes none for anyone -> abort (by the
  server's sweeper, stream_deadlines.py), and the answer is a retry (kind "stall"); silent
  while the server streams for others, it is waiting, aborted only past `wait_s`;
- loop: the streamed loop watch (stream_loop_watch.py) confirms a loop -> abort, read the
  stream's end for the exact token count (at most LOOP_DRAIN_S), and the answer is the text
  so far recorded as cut off (finish_reason "length", flagged loop);
- the whole request past `timeout_s` -> abort, a retry (kind "timeout"), as without streaming.
A connection that fails is reported as gone (the dispatcher decides, as for a plain POST).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import aiohttp
import anyio
import httpx

from supervisor.dispatch.completion import Answer, Retryable, classify_response
from supervisor.dispatch.stream_answer import StreamAnswer
from supervisor.dispatch.stream_deadlines import StreamDeadline, StreamDeadlines, current_clock
from supervisor.dispatch.stream_loop_watch import LoopVerdict, StreamLoopWatch
from supervisor.dispatch.worker_client import WIRE_ERRORS, request_timeout, wire_failure
from supervisor.sglang.abort import abort_request
from supervisor.sglang.chat_request import post_chat

log = logging.getLogger("supervisor.dispatch")

LOOP_DRAIN_S = 10.0      # after aborting a loop, for the final usage (SGLang: one step)
# Dense streams are read in batches (_paced): a stream that has run for PACE_AFTER_S and
# averaged more than DENSE_CHUNKS_PER_S text chunks a second is read every PACE_S. Short
# answers (an instant server's, a benchmark's) and SGLang's 16-token deltas (the daemon's
# default interval: ~3 a second at 50 tok/s) are read as they come.
PACE_S = 0.05
PACE_AFTER_S = 1.0
DENSE_CHUNKS_PER_S = 20.0


@dataclass
class Streamed:
    answer: Answer | None            # None: the connection failed (see `gone`)
    stream: StreamAnswer
    gone: str | None = None
    stalled: bool = False
    loop: LoopVerdict | None = None
    aborted: bool = False            # we sent /abort_request for it
    waited: bool = False             # it waited while its server streamed for others
    server_silent: bool = False      # stalled while the server made no token for anyone

    @property
    def tokens(self) -> int:
        return self.stream.tokens


async def abort_stream(client: httpx.AsyncClient, base_url: str, rid: str) -> bool:
    """Ask the server to stop `rid`; false when it could not be told (already gone: said in
    a warning) or did not take it."""
    told = await abort_request(client, base_url, rid)
    if told.error:
        log.warning("abort of %s at %s failed: %s", rid, base_url, told.error)
    return told.taken


def split_lines(rest: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """The whole lines of one read (after `rest`, the part line the last read ended in), and
    the part line this one ends in. Not aiohttp's own line iterator: it refuses a line
    longer than its buffer, and one coalesced SSE event can carry a whole 32K-token answer.
    SSE ends a line with LF, CRLF or CR (the HTML spec's event-stream grammar); SGLang sends
    LF. Decoding is left to the JSON parser (bytes in)."""
    if rest:
        chunk = rest + chunk
    lines = chunk.splitlines()
    # A read that ends inside a line keeps that part for the next one.
    return lines, b"" if chunk.endswith((b"\n", b"\r")) else lines.pop()


async def stream_chat(client: aiohttp.ClientSession, base_url: str, body: bytes, rid: str, *,
                      stall_s: float, timeout_s: float, watch: StreamLoopWatch | None,
                      deadlines: StreamDeadlines, sa: StreamAnswer | None = None,
                      wait_s: float = float("inf")) -> Streamed:
    """`sa` may be passed in so a caller cancelled meanwhile still knows the tokens so far."""
    sa = sa if sa is not None else StreamAnswer()
    out = Streamed(None, sa)
    give_up_at = anyio.current_time() + timeout_s
    # Watched from the moment it is sent, not from its first chunk: SGLang answers the
    # headers only with the first chunk (`sglang/srt/entrypoints/openai/serving_chat.py`
    # _handle_streaming_request awaits the generator's first item before its
    # StreamingResponse), so a request waiting in its queue is silent before any header.
    with deadlines.watch(rid, stall_s, give_up_at, wait_s) as d:
        try:
            with d.scope:
                # Every streamed request asks for its exact token ids: a truncated answer
                # is continued from them, never from its text (sglang/token_ids.py).
                async with post_chat(client, base_url, body, request_timeout(timeout_s),
                                     token_ids=True) as resp:
                    if resp.status != 200 or not resp.headers.get(
                            "content-type", "").startswith("text/event-stream"):
                        # An error before the stream began (SGLang sends it as plain JSON),
                        # or a server that answers a streamed request in one piece: judged
                        # as unstreamed.
                        text = (await resp.read()).decode("utf-8", "replace")
                        out.answer = classify_response(resp.status, text)
                        if d.expired is None:
                            return out
                    else:
                        await _watch(resp, rid, out, watch, deadlines, d)
        except WIRE_ERRORS as exc:
            if d.expired is None:
                out.answer, out.gone = wire_failure(exc, timeout_s)
                return out
        _expired(out, d, rid, stall_s, timeout_s)
    if out.answer is None:
        out.answer = sa.answer(finish_reason="length" if out.loop is not None else None)
    return out


async def _watch(resp: aiohttp.ClientResponse, rid: str, out: Streamed,
                 watch: StreamLoopWatch | None, deadlines: StreamDeadlines,
                 d: StreamDeadline) -> None:
    """Read the stream, each token pushing its deadline back; the server's sweeper
    (stream_deadlines.py) aborts it on a stall or a timeout, while it is still open. A loop
    is aborted from here, through the sweeper's abort, while the stream stays open: the
    stream then ends as the server ends it (finish_reason abort and the usage: the exact
    tokens it cost), or is cut after LOOP_DRAIN_S."""
    sa = out.stream
    feed = sa.feed
    # The event loop's own clock (anyio.current_time() is this, behind a lookup of the
    # running library on every call: a token's cost at a chunk per token).
    now = current_clock()
    content = resp.content
    read = content.readany
    transport = resp.connection.transport if resp.connection is not None else None
    opened = now()
    rest = b""
    while True:
        # A read per wake-up, its lines handled here: not an async generator of lines, whose
        # every item is a resumption of its own (a chunk per token makes that per token).
        chunk = await read()
        if not chunk:
            if not rest:
                return
            lines, rest = [rest], b""
        else:
            lines, rest = split_lines(rest, chunk)
        for line in lines:
            if not line:
                continue             # the blank line that ends each event
            got = feed(line)
            if got is None:
                if sa.nonsense is not None:
                    return
                continue             # after an error chunk SGLang sends the usage, then
                                     # [DONE]: read on, the connection stays reusable
            if d.cut_at is not None:
                continue             # aborted: read on to the server's end of it
            d.last_token = now()
            if watch is not None and watch.feed(
                    got[0], got[1], generated_tokens=sa.running_tokens) is not None:
                out.loop = watch.verdict
                out.aborted = True
                deadlines.drain(d, LOOP_DRAIN_S)
                await deadlines.abort(rid)
        if transport is not None and d.cut_at is None and not content.is_eof():
            age = now() - opened
            if age > PACE_AFTER_S and sa.text_chunks > age * DENSE_CHUNKS_PER_S:
                await _paced(transport)


async def _paced(transport: asyncio.BaseTransport) -> None:
    """Let a dense stream's chunks gather for PACE_S, its socket unread meanwhile (the
    kernel holds them), so the next read takes them all in one wake-up. At SGLang's default
    `--stream-interval 1` every token is a chunk, and a reader that keeps up reads each one
    alone: the loop's wake-up, the socket read and the parser's callback per token were most
    of the daemon's CPU per chunk, more than anything done with the chunk
    (benchmarks/bench_stream_cpu.py). A stream is read PACE_S later at most: its stall clock
    and loop watch are that much late, a token's worth on a stall_s of seconds."""
    reading = getattr(transport, "is_reading", None)
    if reading is None or not reading():
        return
    transport.pause_reading()           # type: ignore[attr-defined]
    try:
        await anyio.sleep(PACE_S)
    finally:
        if not transport.is_closing():
            transport.resume_reading()  # type: ignore[attr-defined]


def _expired(out: Streamed, d: StreamDeadline, rid: str, stall_s: float,
             timeout_s: float) -> None:
    """What the sweeper's verdict makes of the answer (none: the stream ended by itself)."""
    out.waited = d.waited
    if d.expired is None:
        return
    sa = out.stream
    out.aborted = True
    out.server_silent = d.server_silent
    if d.expired == "timeout":
        out.answer = Retryable(f"no answer within {timeout_s:g} s (streamed)", "timeout")
    else:
        out.stalled = True
        silent = stall_s if d.server_silent else d.wait_s
        why = "" if d.server_silent else ", waiting while the server streamed for others"
        out.answer = Retryable(f"stalled: no token for {silent:g} s after {sa.tokens} tokens"
                               f"{why} (aborted as {rid})", "stall")
