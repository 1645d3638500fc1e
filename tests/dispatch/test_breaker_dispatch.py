"""The circuit breaker against real HTTP servers (child processes on loopback) and a real
SQLite store: a systemic error pauses dispatch before the job is failed, nothing is lost,
and resume goes on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import anyio
import httpx
import pytest

from state.store import Store
from supervisor.contract.pause_sources import PauseSource
from supervisor.servers.endpoint import Endpoint
from tests.fixtures import REPO
from tests.fixtures.dispatching import db_rows, dispatching, job_config, open_store, wait_until
from tests.fixtures.ports import free_port

BREAKER = PauseSource.BREAKER

REFUSING_SERVER = REPO / "tests" / "fixtures" / "refusing_chat_server.py"
BREAKER_KEYS = {"breaker_window": 20, "breaker_min_samples": 10, "breaker_error_rate": 0.5}
# Thinking on needs SGLang's reasoning parser (supervisor/config/checks.py refuses it without).
PARSER = {"flags": {"reasoning-parser": "qwen3"}}


def _rows(n: int, long: set[int] = frozenset()) -> list[dict]:
    return [{"id": f"p{i:04d}", "messages": [{"role": "user", "content":
                                               ("LONG " if i in long else "") + f"Question {i}"}]}
            for i in range(n)]


@pytest.fixture
def refusing_server():
    procs: list[subprocess.Popen] = []

    async def start(mode: str) -> str:
        port = free_port()
        procs.append(subprocess.Popen([sys.executable, str(REFUSING_SERVER), str(port), mode]))
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(trust_env=False) as c:
            async def up() -> bool:
                try:
                    return (await c.get(url + "/count", timeout=1)).status_code == 200
                except httpx.HTTPError:
                    return False
            await wait_until(up, 20, f"{url} to listen")
        return url

    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=10)


async def _asked(url: str) -> int:
    async with httpx.AsyncClient(trust_env=False) as c:
        return (await c.get(url + "/count", timeout=5)).json()["count"]


async def _set_mode(url: str, mode: str) -> None:
    async with httpx.AsyncClient(trust_env=False) as c:
        (await c.post(url + "/mode", content=mode, timeout=5)).raise_for_status()


async def _paused_event(tmp_path) -> dict[str, Any]:
    async def written() -> bool:
        return bool(db_rows(tmp_path, "select 1 from events where kind='paused'"))
    await wait_until(written, 10, "the pause event")
    [(subject, actor, detail)] = db_rows(tmp_path, "select subject, actor, detail from events "
                                         "where kind='paused'")
    assert (subject, actor) == (BREAKER, "supervisor")
    return json.loads(detail)


@pytest.mark.parametrize("mode, kind, message", [
    ("lora400", "HTTP 400", "HTTP 400: LoRA adapter 'v2' was requested, but LoRA is not enabled."),
    ("error500", "HTTP 500", "HTTP 500: Internal server error: CUDA error: an illegal memory"),
])
async def test_a_systemic_error_pauses_dispatch_and_fails_no_prompt(tmp_path, refusing_server,
                                                                      mode, kind, message):
    url = await refusing_server(mode)
    rows = _rows(300)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, dispatch=BREAKER_KEYS, servers=PARSER)
    try:
        async with dispatching(store, cfg) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", url, 4), draining)
                await wait_until(lambda: BREAKER in d.snapshot().paused, 30, "the breaker")
                await wait_until(lambda: d.progress("gpu0").in_flight == 0, 30)
                await d.flush()
                asked = await _asked(url)
                await anyio.sleep(0.3)
                assert await _asked(url) == asked          # nothing more is sent
                reason = d.snapshot().paused[BREAKER]
                snap = d.snapshot().breaker
                draining.set()
            counts = await astore.call(Store.counts)
            detail = await _paused_event(tmp_path)
    finally:
        store.close()
    # The operator's line: the share, the window, and SGLang's own words.
    assert reason.startswith("100% of the last 10 requests failed (threshold 50%): ")
    assert message in reason
    assert snap.tripped == reason and snap.tripped_kind == kind and snap.error_rate == 1.0
    assert detail["reason"] == reason and detail["error"] == kind
    assert detail["sample"].startswith(message) and detail["errors"] == {kind: 10}
    # No prompt failed: every one is pending again, none spent all its attempts.
    assert counts.failed == 0 and counts.in_flight == 0 and counts.pending == len(rows)
    # The nine errors before the one that opened the breaker counted an attempt each (a
    # prompt may have come back for a second); from that one on, none did.
    [(most, total)] = db_rows(tmp_path, "select max(attempts), sum(attempts) from prompts")
    assert most < cfg.dispatch.max_attempts and total == 9
    # Stopped at the tenth error: only the other three slots' requests were on the wire.
    assert asked <= 10 + 3


async def test_resume_after_the_fix_finishes_the_job(tmp_path, refusing_server):
    url = await refusing_server("lora400")
    rows = _rows(60)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, dispatch=BREAKER_KEYS, servers=PARSER)
    try:
        async with dispatching(store, cfg) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", url, 4), draining)
                await wait_until(lambda: d.paused, 30, "the breaker")
                await _set_mode(url, "good")                # the operator fixed the setting
                assert await d.resume(BREAKER, "test")
                assert d.snapshot().breaker.samples == 0    # a fresh window

                async def all_done() -> bool:
                    return (await astore.call(Store.counts)).done == len(rows)
                await wait_until(all_done, 30, "every prompt done")
                draining.set()
            snap = d.snapshot()
    finally:
        store.close()
    assert not snap.paused and snap.breaker.tripped is None
    assert snap.breaker.errors_total >= 10
    assert db_rows(tmp_path, "select count(*) from prompts where status='done' and error is null") \
        == [(len(rows),)]
    [(was,)] = db_rows(tmp_path, "select json_extract(detail, '$.was') from events "
                       "where kind='resumed' and subject='breaker'")
    assert "LoRA adapter" in was


async def test_a_few_prompts_too_long_fail_alone_and_the_breaker_stays_shut(tmp_path,
                                                                           refusing_server):
    url = await refusing_server("long400")
    long = {3, 17, 40}
    rows = _rows(60, long)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, dispatch=BREAKER_KEYS, servers=PARSER)
    try:
        async with dispatching(store, cfg) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", url, 4), draining)

                async def finished() -> bool:
                    c = await astore.call(Store.counts)
                    return c.done + c.failed == len(rows)
                await wait_until(finished, 30, "every prompt finished")
                draining.set()
            snap = d.snapshot()
    finally:
        store.close()
    assert not snap.paused and snap.breaker.errors_total == len(long)
    failed = db_rows(tmp_path, "select id, attempts, error from prompts where status='failed'")
    assert sorted(r[0] for r in failed) == [f"p{i:04d}" for i in sorted(long)]
    for _, attempts, error in failed:
        # Permanent on the first refusal: SGLang refuses the same prompt the same way.
        assert attempts == 1 and "longer than the model's context length" in error


async def test_every_prompt_refused_for_length_pauses_before_the_job_is_failed(tmp_path,
                                                                               sim_server):
    """max_tokens that leaves no room in the context: SGLang refuses every prompt with a
    context-length message. Permanent one by one, but not by the thousand."""
    sim = sim_server("--sim-instant", "--context-length", "256")
    rows = _rows(200)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, dispatch=BREAKER_KEYS, servers=PARSER,
                     generation={"max_tokens": 250})
    try:
        async with dispatching(store, cfg) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 4), draining)
                await wait_until(lambda: d.paused, 30, "the breaker")
                await wait_until(lambda: d.progress("gpu0").in_flight == 0, 30)
                await d.flush()
                draining.set()
            counts = await astore.call(Store.counts)
            reason = d.snapshot().paused[BREAKER]
    finally:
        store.close()
    assert "Requested token count exceeds the model's maximum context length" in reason
    # Those refused before the breaker opened are failed, the one that opened it and every
    # one after went back to pending.
    assert counts.failed == BREAKER_KEYS["breaker_min_samples"] - 1
    assert counts.pending == len(rows) - counts.failed and counts.in_flight == 0


async def test_one_broken_server_among_good_ones_is_named(tmp_path, refusing_server):
    """A server answering 500 to everything fails its requests in milliseconds and fills the
    window alone: the reason says which server, since the others answer."""
    good = await refusing_server("good")
    broken = await refusing_server("error500")
    rows = _rows(2000)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, dispatch=BREAKER_KEYS, servers=PARSER)
    try:
        async with dispatching(store, cfg) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", good, 4), draining)
                await wait_until(lambda: d.rates.snapshot(time.time()).completions > 0, 30,
                                 "gpu0 to answer")
                tg.start_soon(d.serve, Endpoint("gpu1", broken, 4), draining)
                await wait_until(lambda: BREAKER in d.snapshot().paused, 30, "the breaker")
                draining.set()
            snap = d.snapshot().breaker
            counts = await astore.call(Store.counts)
    finally:
        store.close()
    assert snap.tripped is not None
    assert " failed on gpu1 (the other servers answer) " in snap.tripped
    assert "HTTP 500: Internal server error" in snap.tripped
    assert set(snap.errors_by_server) == {"gpu1"} and counts.failed == 0
