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


class Progress:
    last_token_at: float | None = None
    waiting: int = 0


async def _talker(deadlines: StreamDeadlines, stop: anyio.Event, every: float = 0.05) -> None:
    """A stream of the same server that keeps making tokens until `stop`."""
    with deadlines.watch("talker#1#00", 60.0, anyio.current_time() + 60) as d, d.scope:
        while not stop.is_set():
            await anyio.sleep(every)
            d.last_token = anyio.current_time()


async def test_a_silent_stream_while_the_server_streams_for_others_waits_until_wait_s() -> None:
    # SGLang queued or retracted it: silent past stall_s, while another stream of the same
    # server makes tokens. Waiting, shown, not aborted before wait_s; then aborted, and not
    # as a silent server's stall.
    server = Server(ends_on_abort=True)
    progress = Progress()
    deadlines = StreamDeadlines(server.abort, progress=progress)
    stop = anyio.Event()
    seen_waiting = 0
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(deadlines.run)
            tg.start_soon(_talker, deadlines, stop)
            t0 = anyio.current_time()
            with deadlines.watch("p1#1#ab", 0.2, t0 + 60, wait_s=1.0) as d, d.scope:
                while not server.ended.is_set():
                    await anyio.sleep(0.05)
                    seen_waiting = max(seen_waiting, progress.waiting)
            took = anyio.current_time() - t0
            stop.set()
            tg.cancel_scope.cancel()
    assert d.expired == "stall" and d.waited and not d.server_silent
    assert server.aborted == ["p1#1#ab"]
    assert took >= 1.0, took                     # not at stall_s (0.2 s): at wait_s
    assert seen_waiting == 1
    assert progress.last_token_at is not None and progress.last_token_at > t0


async def test_a_silent_stream_on_a_silent_server_is_a_stall_at_stall_s() -> None:
    server = Server(ends_on_abort=True)
    progress = Progress()
    deadlines = StreamDeadlines(server.abort, progress=progress)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(deadlines.run)
            t0 = anyio.current_time()
            with deadlines.watch("p1#1#ab", 0.2, t0 + 60, wait_s=5.0) as d, d.scope:
                await server.ended.wait()
            took = anyio.current_time() - t0
            tg.cancel_scope.cancel()
    assert d.expired == "stall" and d.server_silent and not d.waited
    assert 0.2 <= took < 1.0
    assert progress.waiting == 0 and progress.last_token_at is None   # no token was made


async def test_sglangs_own_token_counter_moving_means_waiting_too() -> None:
    # Unstreamed neighbours (or another client) keep the server busy: its decode counter
    # moves, so the lone silent stream is waiting, not stalled.
    server = Server(ends_on_abort=True)
    deadlines = StreamDeadlines(server.abort, server_tokens_at=anyio.current_time)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(deadlines.run)
            t0 = anyio.current_time()
            with deadlines.watch("p1#1#ab", 0.1, t0 + 60, wait_s=0.6) as d, d.scope:
                await server.ended.wait()
            took = anyio.current_time() - t0
            tg.cancel_scope.cancel()
    assert d.waited and not d.server_silent and took >= 0.6
