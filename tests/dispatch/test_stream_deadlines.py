"""The per-server sweeper of stream deadlines (supervisor/dispatch/stream_deadlines.py): a
stream without a token for stall_s, or past its whole-request timeout, is aborted by its
request id while still open; one the server does not end after that is cut; tokens push the
deadline back. Short real times, every wait bounded."""

from __future__ import annotations

import anyio
import pytest

from supervisor.dispatch import stream_deadlines
from supervisor.dispatch.stream_deadlines import StreamDeadlines


class Server:
    """Records aborts; `ends_on_abort`: the stream then ends, as SGLang ends an aborted one."""

    def __init__(self, ends_on_abort: bool) -> None:
        self.aborted: list[str] = []
        self.ended = anyio.Event()
        self.ends_on_abort = ends_on_abort

    async def abort(self, rid: str) -> None:
        self.aborted.append(rid)
        if self.ends_on_abort:
            self.ended.set()


async def _read(deadlines: StreamDeadlines, server: Server, rid: str, *, stall_s: float,
                timeout_s: float, tokens_every: float | None, tokens: int) -> tuple[str | None, bool]:
    """A stream that sends `tokens` tokens every `tokens_every` s, then nothing until the
    server ends it. Returns (expired, cut)."""
    with deadlines.watch(rid, stall_s, anyio.current_time() + timeout_s) as d, d.scope:
        for _ in range(tokens):
            await anyio.sleep(tokens_every or 0)
            d.last_token = anyio.current_time()
        await server.ended.wait()
    return d.expired, d.scope.cancelled_caught


async def _run(server: Server, **kw) -> tuple[str | None, bool]:
    deadlines = StreamDeadlines(server.abort)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(deadlines.run)
            got = await _read(deadlines, server, "p1#1#ab", **kw)
            tg.cancel_scope.cancel()
    return got


async def test_a_stall_is_aborted_by_its_rid_and_ends_as_the_server_ends_it() -> None:
    server = Server(ends_on_abort=True)
    t0 = anyio.current_time()
    expired, cut = await _run(server, stall_s=0.2, timeout_s=60, tokens_every=None, tokens=0)
    assert expired == "stall" and not cut and server.aborted == ["p1#1#ab"]
    assert anyio.current_time() - t0 >= 0.2


async def test_tokens_push_the_deadline_back() -> None:
    server = Server(ends_on_abort=True)
    t0 = anyio.current_time()
    # 8 tokens 0.1 s apart under a 0.3 s stall clock: no abort until they stop.
    expired, _ = await _run(server, stall_s=0.3, timeout_s=60, tokens_every=0.1, tokens=8)
    assert expired == "stall" and server.aborted == ["p1#1#ab"]
    assert anyio.current_time() - t0 >= 0.8 + 0.3


async def test_the_whole_request_timeout_is_a_timeout_even_while_tokens_flow() -> None:
    server = Server(ends_on_abort=True)
    expired, _ = await _run(server, stall_s=5, timeout_s=0.3, tokens_every=0.05, tokens=40)
    assert expired == "timeout" and server.aborted == ["p1#1#ab"]


async def test_a_stream_the_server_does_not_end_after_the_abort_is_cut(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_deadlines, "ABORT_DRAIN_S", 0.2)
    server = Server(ends_on_abort=False)
    expired, cut = await _run(server, stall_s=0.1, timeout_s=60, tokens_every=None, tokens=0)
    assert expired == "stall" and cut and server.aborted == ["p1#1#ab"]


async def test_a_stream_that_ends_in_time_is_left_alone() -> None:
    server = Server(ends_on_abort=True)
    deadlines = StreamDeadlines(server.abort)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(deadlines.run)
            with deadlines.watch("p2#1#cd", 0.1, anyio.current_time() + 60) as d, d.scope:
                await anyio.sleep(0.02)
            await anyio.sleep(0.3)           # past its deadline: it is no longer watched
            tg.cancel_scope.cancel()
    assert d.expired is None and server.aborted == []
