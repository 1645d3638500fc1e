"""The dispatcher against real simulated SGLang servers (child processes, loopback HTTP)
and a real SQLite store."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

from state.store import Store
from supervisor.servers.endpoint import Endpoint
from tests.fixtures import REPO
from tests.fixtures.dispatching import (
    db_rows,
    dispatching,
    job_config,
    open_store,
    serve_until,
    wait_until,
)
from tests.fixtures.ports import free_port
from tests.fixtures.real_prompts import real_prompts

ODD_SERVER = REPO / "tests" / "fixtures" / "odd_chat_server.py"


def _rows(n: int, text: str = "Say something about the number {i}.") -> list[dict]:
    return [{"id": f"p{i:04d}", "messages": [{"role": "user", "content": text.format(i=i)}]}
            for i in range(n)]


async def test_real_prompts_complete_once_with_every_field(tmp_path, sim_server):
    sim = sim_server("--sim-instant", "--max-running-requests", "8",
                     "--reasoning-parser", "qwen3")      # SGLang splits the thinking only so
    rows = real_prompts()
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, job={"model": "test-model"}, generation={"max_tokens": 2048})
    try:
        async with dispatching(store, cfg) as (d, astore):
            await serve_until(d, astore, Endpoint("gpu0", sim.base_url, 8),
                              lambda c: c.done == len(rows))
            assert d.progress("gpu0").peak_in_flight == 8     # every slot was used
    finally:
        store.close()
    got = db_rows(tmp_path, "select id, status, attempts, finish_reason, max_tokens, server, "
                  "completion_tokens, content, reasoning_content from prompts")
    assert sorted(r[0] for r in got) == sorted(r["id"] for r in rows)
    for (pid, status, attempts, finish, max_tokens, server, ctoks, content, reasoning) in got:
        assert status == "done" and attempts == 1, pid
        assert finish in ("stop", "length") and max_tokens == 2048 and server == "gpu0"
        assert 0 < ctoks <= 2048
        assert reasoning                      # thinking was on
        if finish == "stop":
            assert content


async def test_prompt_longer_than_context_fails_with_sglangs_message(tmp_path, sim_server):
    sim = sim_server("--sim-instant", "--context-length", "256")
    rows = _rows(5) + [{"id": "long", "messages": [{"role": "user", "content": "word " * 2000}]}]
    store = open_store(tmp_path, rows)
    try:
        # max_tokens 100: prompt + budget must fit the 256-token context, as in SGLang.
        cfg = job_config(tmp_path, generation={"max_tokens": 100})
        async with dispatching(store, cfg) as (d, astore):
            await serve_until(d, astore, Endpoint("gpu0", sim.base_url, 4),
                              lambda c: c.done + c.failed == len(rows))
    finally:
        store.close()
    [(status, attempts, error)] = db_rows(
        tmp_path, "select status, attempts, error from prompts where id='long'")
    assert status == "failed" and attempts == 1      # never retried
    assert error.startswith("HTTP 400") and "context length" in error
    assert db_rows(tmp_path, "select count(*) from prompts where status='done'") == [(5,)]


@pytest.fixture
def odd_server():
    procs = []

    def start(mode: str) -> str:
        port = free_port()
        procs.append(subprocess.Popen([sys.executable, str(ODD_SERVER), str(port), mode]))
        return f"http://127.0.0.1:{port}"

    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=10)


async def _wait_listening(url: str) -> None:
    import httpx

    async with httpx.AsyncClient(trust_env=False) as c:
        async def up() -> bool:
            try:
                await c.get(url + "/health", timeout=1)
                return True
            except httpx.HTTPError:
                return False
        await wait_until(up, 20, f"{url} to listen")


@pytest.mark.parametrize("mode, expect", [
    ("error500", "HTTP 500: internal"),
    ("garbage", "server answered nonsense"),
    ("abort", "finish_reason abort"),
])
async def test_retryable_answers_count_attempts_up_to_the_limit(tmp_path, odd_server, mode, expect):
    url = odd_server(mode)
    await _wait_listening(url)
    rows = _rows(6)
    store = open_store(tmp_path, rows)
    try:
        async with dispatching(store, job_config(tmp_path)) as (d, astore):
            await serve_until(d, astore, Endpoint("gpu0", url, 3),
                              lambda c: c.failed == len(rows))
    finally:
        store.close()
    got = db_rows(tmp_path, "select attempts, error from prompts")
    assert all(attempts == 3 and expect in error for attempts, error in got), got


async def test_a_retry_that_then_succeeds_is_done_on_its_second_attempt(tmp_path, odd_server):
    url = odd_server("flaky")
    await _wait_listening(url)
    rows = _rows(6)
    store = open_store(tmp_path, rows)
    try:
        async with dispatching(store, job_config(tmp_path)) as (d, astore):
            await serve_until(d, astore, Endpoint("gpu0", url, 3), lambda c: c.done == len(rows))
    finally:
        store.close()
    assert set(db_rows(tmp_path, "select status, attempts, error from prompts")) == {("done", 2, None)}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "unstreamed"])
@pytest.mark.parametrize("mode, expect", [
    # A reply that is not HTTP: an answer of nonsense, retried at once.
    ("not-http", "unreadable answer"),
    # A connection closed in the middle of the answer: the server may have died; after the
    # grace with the server still up, a retry of kind connection.
    ("cut", "connection to gpu0 failed"),
    # No byte back within dispatch.request_timeout_s.
    ("silent", "no answer within 1 s"),
])
async def test_wire_failures_are_retries_that_name_the_fault(tmp_path, odd_server, mode,
                                                            expect, stream):
    url = odd_server(mode)
    await _wait_listening(url)
    rows = _rows(3)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, dispatch={"max_attempts": 2, "stream": stream,
                                         "request_timeout_s": 1.0})
    try:
        async with dispatching(store, cfg) as (d, astore):
            d.gone_grace_s = 0.05
            await serve_until(d, astore, Endpoint("gpu0", url, 3),
                              lambda c: c.failed == len(rows))
    finally:
        store.close()
    got = db_rows(tmp_path, "select attempts, error from prompts")
    assert all(a == 2 and expect in e for a, e in got), got


async def test_unreachable_server_is_retried_after_the_grace(tmp_path):
    rows = _rows(3)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, dispatch={"max_attempts": 2})
    try:
        async with dispatching(store, cfg) as (d, astore):
            d.gone_grace_s = 0.05
            await serve_until(d, astore, Endpoint("gpu0", f"http://127.0.0.1:{free_port()}", 2),
                              lambda c: c.failed == len(rows))
    finally:
        store.close()
    got = db_rows(tmp_path, "select attempts, error from prompts")
    assert all(a == 2 and "connection to gpu0 failed" in e for a, e in got), got


async def test_cancelled_serve_requeues_in_flight_without_counting_attempts(tmp_path, sim_server):
    # Slow enough that requests are in flight when the server "goes away".
    sim = sim_server("--sim-tokens-per-s", "20", "--max-running-requests", "4")
    rows = _rows(20)
    store = open_store(tmp_path, rows)
    try:
        async with dispatching(store, job_config(tmp_path)) as (d, astore):
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 4), anyio.Event())
                    await wait_until(lambda: d.progress("gpu0").in_flight == 4, 20, "4 in flight")
                    scope.cancel()
            counts = await astore.call(Store.counts)
    finally:
        store.close()
    assert counts.in_flight == 0 and counts.pending + counts.done == len(rows)
    assert counts.pending >= 4
    assert db_rows(tmp_path, "select max(attempts) from prompts where status='pending'") == [(0,)]


async def test_drain_lets_in_flight_finish_and_gives_back_the_buffer(tmp_path, sim_server):
    sim = sim_server("--sim-tokens-per-s", "200", "--max-running-requests", "4")
    rows = _rows(40)
    store = open_store(tmp_path, rows)
    try:
        async with dispatching(store, job_config(tmp_path, generation={"max_tokens": 64})) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 4), draining)
                await wait_until(lambda: d.progress("gpu0").in_flight == 4, 20, "4 in flight")
                draining.set()
            await d.flush()
            counts = await astore.call(Store.counts)
            completed = d.progress("gpu0").completed
    finally:
        store.close()
    assert counts.in_flight == 0
    assert counts.done == completed >= 4 and counts.pending == len(rows) - completed


async def test_max_tokens_changes_live_and_in_flight_keep_their_limit(tmp_path, sim_server):
    sim = sim_server("--sim-tokens-per-s", "100", "--max-running-requests", "4", "--sim-seed", "1")
    rows = _rows(24)
    store = open_store(tmp_path, rows)
    try:
        async with dispatching(store, job_config(tmp_path, generation={"max_tokens": 40})) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 4), draining)
                await wait_until(lambda: d.progress("gpu0").in_flight == 4, 20, "4 in flight")
                old = await d.set_max_tokens(60, "test")
                assert old == 40

                async def all_done() -> bool:
                    return (await astore.call(Store.counts)).done == len(rows)
                await wait_until(all_done, 60)
                draining.set()
            assert await astore.call(Store.get_setting, "max_tokens") == "60"
    finally:
        store.close()
    got = db_rows(tmp_path, "select max_tokens, completion_tokens, started_at from prompts")
    limits = {m for m, _, _ in got}
    assert limits == {40, 60}
    assert all(c <= m for m, c, _ in got)
    # The ones at the old limit were all sent before any at the new limit.
    assert max(s for m, _, s in got if m == 40) <= min(s for m, _, s in got if m == 60)
    events = db_rows(tmp_path, "select kind, actor from events where kind='max_tokens'")
    assert events == [("max_tokens", "test")]


async def test_empty_outputs_trip_the_quality_gate_and_pause(tmp_path, sim_server):
    sim = sim_server("--sim-instant", "--sim-empty-rate", "1.0")
    rows = _rows(200)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, quality={"window": 20, "min_samples": 10, "max_bad_rate": 0.5})
    try:
        async with dispatching(store, cfg) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 4), draining)
                await wait_until(lambda: d.paused, 30, "the gate to pause dispatch")
                await wait_until(lambda: d.progress("gpu0").in_flight == 0, 30)
                await d.flush()
                stopped_at = (await astore.call(Store.counts)).done
                await anyio.sleep(0.3)
                assert (await astore.call(Store.counts)).done == stopped_at   # nothing new
                assert "empty_content" in d.snapshot().paused["quality"]
                draining.set()
            counts = await astore.call(Store.counts)
    finally:
        store.close()
    assert 10 <= counts.done < 40 and counts.pending == len(rows) - counts.done
    assert counts.in_flight == 0
    [(actor, detail)] = db_rows(tmp_path, "select actor, detail from events where kind='paused'")
    assert actor == "quality-gate" and "bad output" in detail


async def test_answers_cut_off_inside_the_thinking_pause_dispatch_by_default(tmp_path,
                                                                             sim_server):
    """The "87% empty answers" job: max tokens runs out before the model stops thinking.
    The default quality.max_thinking_truncated_rate catches it early."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    rows = _rows(300)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, generation={"max_tokens": 64},
                     quality={"window": 40, "min_samples": 20},
                     servers={"flags": {"reasoning-parser": "qwen3"}})
    assert cfg.quality.max_thinking_truncated_rate == 0.5        # the default
    try:
        async with dispatching(store, cfg) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 4), draining)
                await wait_until(lambda: d.paused, 30, "the gate to pause dispatch")
                await wait_until(lambda: d.progress("gpu0").in_flight == 0, 30)
                await d.flush()
                draining.set()
            counts = await astore.call(Store.counts)
            snap = d.snapshot()
    finally:
        store.close()
    reason = snap.paused["quality"]
    assert reason.startswith("truncated inside the thinking: ") and "threshold 50%" in reason
    q = snap.quality
    assert q.thinking_truncated_rate > 0.5 and q.thinking_truncated_total >= 11
    assert abs(q.truncation_rate - q.thinking_truncated_rate - q.answer_truncated_rate) < 1e-9
    assert q.bad_rate == 0            # cut off in the thinking is truncation, not bad output
    # Stopped early: a window's worth, not the job.
    assert counts.done < 60 and counts.pending == len(rows) - counts.done
    in_thinking = db_rows(tmp_path, "select count(*) from prompts where status='done' and "
                          "finish_reason='length' and content='' and reasoning_content<>''")
    assert in_thinking[0][0] == q.thinking_truncated_total


async def test_max_tokens_at_or_past_the_context_length_is_refused(tmp_path):
    store = open_store(tmp_path, _rows(2))
    cfg = job_config(tmp_path, generation={"max_tokens": 4096},
                     servers={"flags": {"context-length": 16384, "reasoning-parser": "qwen3"}})
    try:
        async with dispatching(store, cfg) as (d, astore):
            with pytest.raises(ValueError, match="context length"):
                await d.set_max_tokens(16384, "test")
            assert d.max_tokens == 4096
            assert await d.set_max_tokens(8192, "test") == 4096
            for bad in (0, -5, True, "8192"):
                with pytest.raises(ValueError):
                    await d.set_max_tokens(bad, "test")
            assert await astore.call(Store.get_setting, "max_tokens") == "8192"
    finally:
        store.close()
