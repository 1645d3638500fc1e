"""The saturation guard's second sign on a real job: the Job in-process, one simulated SGLang
server with --enable-metrics whose decoding collapses mid-job (`--sim-fault collapse`:
every request decodes 8 times slower while the server stays up, and its
sglang:gen_throughput falls with it). The guard reads the collapse from SGLang's /metrics
while the dispatcher keeps the server as busy as before, lowers the in-flight limit live and
says why (log line, `inflight_limit` event, status); decoding then recovers and the limit is
raised back a step per calm interval to the server's max; while the collapse lasts, the
limit is held where the cut left it."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import anyio
import httpx
import pytest

from supervisor.client.control_client import ControlClient
from supervisor.contract.status import Status
from supervisor.job.main_loop import Job
from tests.fixtures.real_job import (
    SLOTS,
    completed_on,
    job_config,
    query,
    run_job,
    sim_state,
    wait_fleet,
    wait_for,
)

FLOOR = 4
CALM_S = 2.0
COLLAPSED = "generation throughput collapsed"


def _status(sock: str) -> Status:
    with ControlClient(sock) as client:
        return client.status()


async def _fault(port: int, fault: str) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        resp = await client.post(f"http://127.0.0.1:{port}/sim/fault",
                                 json={"fault": fault, "collapse_factor": 8}, timeout=5.0)
        resp.raise_for_status()


async def test_a_collapsing_server_gets_its_limit_lowered_then_raised_back_step_by_step(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="supervisor.servers")
    cfg = job_config(tmp_path, servers=1, prompts=20_000, flags={"enable-metrics": True})
    cfg = replace(cfg, dispatch=replace(cfg.dispatch, saturation_floor=FLOOR,
                                        saturation_calm_s=CALM_S))
    port = cfg.servers.base_port
    seen: dict[str, object] = {}

    async def drive(job: Job) -> None:
        fleet = await wait_fleet(job)
        assert job.dispatcher is not None
        d = job.dispatcher

        def limit() -> int | None:
            lim = d.inflight_limit("gpu0")
            return None if lim is None else lim.limit

        # Busy at full speed for a while: the guard has its peak (8 requests of 0.1 s, ~20k
        # tokens a second, polled every 0.2 s).
        await wait_for(lambda: completed_on(job, "gpu0") >= 150, "a busy start", timeout_s=60)
        await wait_for(lambda: limit() == SLOTS, "the limit at the max before the fault",
                       timeout_s=30)
        peak = fleet.servers["gpu0"].ready.sglang.view.gen_throughput
        await _fault(port, "collapse")
        await wait_for(lambda: (limit() or SLOTS) < SLOTS, "the limit lowered", timeout_s=30)
        seen["collapsed_tput"] = fleet.servers["gpu0"].ready.sglang.view.gen_throughput
        seen["peak"] = peak
        sock = str(cfg.path(cfg.control.socket))
        with anyio.fail_after(20):
            while True:       # the status is built on its own tick: wait for one with it
                status = await anyio.to_thread.run_sync(_status, sock)
                if (status.servers[0].inflight_limit or SLOTS) < SLOTS:
                    break
                await anyio.sleep(0.05)
        seen["status"] = status
        seen["sim"] = await sim_state(port)
        await _fault(port, "none")          # decoding recovers
        await wait_for(lambda: limit() == SLOTS, "the limit raised back to the max",
                       timeout_s=60)
        seen["server"] = fleet.servers["gpu0"].snapshot()
        job.request_stop("test over")

    _, result = await run_job(cfg, drive, timeout_s=110)
    assert result.reason == "stopped by test over"

    # The simulated server really slowed down, and SGLang's gauge said so.
    assert seen["sim"]["fault"] == "collapse"                       # type: ignore[index]
    assert seen["sim"]["decode_speed"] == 1 / 8                     # type: ignore[index]
    assert seen["peak"] and seen["collapsed_tput"] is not None
    assert seen["collapsed_tput"] < 0.5 * seen["peak"]              # type: ignore[operator]

    srv = seen["status"].servers[0]                                 # type: ignore[attr-defined]
    assert srv.max_running == SLOTS and srv.inflight_limit < SLOTS
    assert COLLAPSED in (srv.inflight_limit_reason or "")
    assert seen["server"].inflight_limit == SLOTS                   # type: ignore[attr-defined]
    assert seen["server"].inflight_limit_reason is None             # type: ignore[attr-defined]

    moves = [json.loads(d) for (d,) in query(
        cfg, "SELECT detail FROM events WHERE kind = 'inflight_limit' AND subject = 'gpu0' "
             "ORDER BY id")]
    steps = [(m["from"], m["to"]) for m in moves]
    downs = [m for m in moves if m["to"] < m["from"]]
    ups = [m for m in moves if m["to"] > m["from"]]
    assert downs and ups and steps[-1][1] == SLOTS, steps
    assert all(b[0] == a[1] for a, b in zip(steps, steps[1:])), steps
    assert steps[0][0] == SLOTS
    assert all(COLLAPSED in m["reason"] for m in downs), downs
    # One step (an eighth of 8) at a time, never below the floor, never more than halved.
    assert all(m["to"] >= max(FLOOR, m["from"] // 2) for m in downs), downs
    assert all(m["to"] == m["from"] + 1 and "calm for" in m["reason"] for m in ups), ups
    assert all(m["max"] == SLOTS for m in moves)
    lines = "\n".join(r.getMessage() for r in caplog.records if r.name == "supervisor.servers")
    assert f"gpu0: in-flight limit {SLOTS} -> {downs[0]['to']} of {SLOTS}: {COLLAPSED}" in lines


@pytest.mark.slow
async def test_the_limit_stays_lowered_while_the_collapse_lasts(tmp_path: Path) -> None:
    cfg = job_config(tmp_path, servers=1, prompts=20_000, flags={"enable-metrics": True})
    cfg = replace(cfg, dispatch=replace(cfg.dispatch, saturation_floor=FLOOR,
                                        saturation_calm_s=CALM_S))
    port = cfg.servers.base_port
    held: list[int] = []

    async def drive(job: Job) -> None:
        await wait_fleet(job)
        assert job.dispatcher is not None
        d = job.dispatcher

        def limit() -> int:
            lim = d.inflight_limit("gpu0")
            return SLOTS if lim is None else lim.limit

        await wait_for(lambda: completed_on(job, "gpu0") >= 150, "a busy start", timeout_s=60)
        await wait_for(lambda: limit() == SLOTS, "the limit at the max before the fault",
                       timeout_s=30)
        await _fault(port, "collapse")
        await wait_for(lambda: limit() < SLOTS, "the limit lowered", timeout_s=30)
        # Two calm intervals and more of the same collapse (bounded: 20 polls of 0.25 s).
        for _ in range(20):
            held.append(limit())
            await anyio.sleep(CALM_S / 8)
        assert (await sim_state(port))["fault"] == "collapse"
        job.request_stop("test over")

    _, result = await run_job(cfg, drive, timeout_s=110)
    assert result.reason == "stopped by test over"
    assert held and max(held) < SLOTS, held
