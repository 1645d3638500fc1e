"""The dispatch path reads the job's settings from the live settings at the moment it needs
them: a reloaded request timeout and claim batch apply to the next request, not from the
server's next life (each worker's HTTP session is made once per life)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import anyio

from state.async_store import AsyncStore
from state.store import Store
from supervisor.config.live_settings import LiveSettings
from supervisor.dispatch.dispatcher import Dispatcher
from supervisor.servers.endpoint import Endpoint
from tests.fixtures.dispatching import db_rows, job_config, open_store, wait_until


def _rows(n: int) -> list[dict]:
    return [{"id": f"p{i:03d}", "messages": [{"role": "user", "content": f"Count to {i}."}]}
            for i in range(n)]


async def test_a_reloaded_request_timeout_applies_to_the_next_request(tmp_path: Path,
                                                                     sim_server) -> None:
    # About 4 s an answer at time-scale 1 (100 tokens at 25 tok/s): well inside the first
    # timeout (30 s), well past the reloaded one (1 s). Unstreamed, so only the HTTP
    # session's own read timeout can end a request early.
    sim = sim_server("--max-running-requests", "2", "--sim-tokens-per-s", "25",
                     "--sim-time-scale", "1")
    store = open_store(tmp_path, _rows(6))
    cfg = job_config(tmp_path, generation={"max_tokens": 100, "enable_thinking": False},
                     dispatch={"request_timeout_s": 30.0, "stream": False, "max_attempts": 5})
    live = LiveSettings(cfg)
    astore = AsyncStore(store)
    d = Dispatcher(astore, live)
    try:
        async with d.running():
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 2), draining)
                await wait_until(lambda: d.progress("gpu0").in_flight == 2, 30, "two sent")
                live.reload(replace(cfg, dispatch=replace(cfg.dispatch, request_timeout_s=1.0)),
                            {})
                await wait_until(lambda: d.progress("gpu0").errors >= 1, 30,
                                 "a request ended by the reloaded timeout")
                draining.set()
    finally:
        store.close()
    errors = [e for (e,) in db_rows(tmp_path, "SELECT error FROM prompts "
                                              "WHERE error IS NOT NULL")]
    assert any("no answer within 1 s" in e for e in errors), errors


async def test_max_tokens_is_read_per_request_from_the_live_settings(tmp_path: Path,
                                                                    sim_server) -> None:
    sim = sim_server("--sim-instant", "--max-running-requests", "4")
    store = open_store(tmp_path, _rows(40))
    cfg = job_config(tmp_path, generation={"max_tokens": 64, "enable_thinking": False},
                     servers={"flags": {"context-length": 1024}})
    live = LiveSettings(cfg)
    d = Dispatcher(AsyncStore(store), live)
    try:
        async with d.running():
            assert await d.set_max_tokens(128, "test") == 64
            assert live.max_tokens == 128 and d.max_tokens == 128
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 4), draining)

                async def done() -> bool:
                    return (await d.astore.call(Store.counts)).done == 40
                await wait_until(done, 60, "every prompt answered")
                draining.set()
    finally:
        store.close()
    assert {m for (m,) in db_rows(tmp_path, "SELECT DISTINCT max_tokens FROM prompts")} == {128}
