"""The saturation guard on a real job: the Job in-process, a simulated SGLang server with
--enable-metrics retracting requests (`--sim-fault retract`, SGLang's "KV cache pool is
full. Retract requests." line and counter). Its in-flight limit is lowered live and said
(log line, `inflight_limit` event, status, /metrics); once the retractions stop, it is
raised back a step per calm interval to the server's max."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.client.control_client import ControlClient
from supervisor.contract.status import Status
from supervisor.job.main_loop import Job
from tests.fixtures.real_job import (
    SLOTS,
    job_config,
    query,
    run_job,
    sim_fault,
    wait_fleet,
    wait_for,
)

FLOOR = 5


def _status(sock: str) -> Status:
    with ControlClient(sock) as client:
        return client.status()


@pytest.mark.slow
async def test_a_retracting_server_gets_its_limit_lowered_then_raised_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="supervisor.servers")
    cfg = job_config(tmp_path, servers=1, prompts=20_000,
                     flags={"enable-metrics": True, "sim-fault": "retract"})
    cfg = replace(cfg, dispatch=replace(cfg.dispatch, saturation_floor=FLOOR,
                                        saturation_calm_s=1.0))
    seen: dict[str, object] = {}

    async def drive(job: Job) -> None:
        fleet = await wait_fleet(job)
        assert job.dispatcher is not None
        d = job.dispatcher

        def limit() -> int | None:
            lim = d.inflight_limit("gpu0")
            return None if lim is None else lim.limit

        await wait_for(lambda: (limit() or SLOTS) <= FLOOR, "the limit lowered to the floor",
                       timeout_s=60)
        sock = str(cfg.path(cfg.control.socket))
        with anyio.fail_after(20):
            while True:       # the status is built on its own tick: wait for one with it
                status = await anyio.to_thread.run_sync(_status, sock)
                if (status.servers[0].inflight_limit or SLOTS) <= FLOOR:
                    break
                await anyio.sleep(0.05)
        seen["status"] = status
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=sock),
                                     trust_env=False) as client:
            seen["metrics"] = (await client.get("http://daemon/metrics", timeout=10)).text
        # The server calms down: no more retractions.
        await sim_fault(cfg.servers.base_port, "none")
        await wait_for(lambda: limit() == SLOTS, "the limit raised back to the max",
                       timeout_s=60)
        seen["server"] = fleet.servers["gpu0"].snapshot()
        job.request_stop("test over")

    _, result = await run_job(cfg, drive, timeout_s=110)
    assert result.reason == "stopped by test over"

    srv = seen["status"].servers[0]                                 # type: ignore[attr-defined]
    assert srv.max_running == SLOTS and srv.inflight_limit == FLOOR
    assert "retracting" in (srv.inflight_limit_reason or "")
    families = {f.name: f for f in text_string_to_metric_families(seen["metrics"])}  # type: ignore[arg-type]
    assert [(x.labels["server"], x.value) for x in
            families["dflash_server_inflight_limit"].samples] == [("gpu0", FLOOR)]
    assert families["dflash_server_inflight_max"].samples[0].value == SLOTS
    assert seen["server"].inflight_limit == SLOTS                   # type: ignore[attr-defined]
    assert seen["server"].inflight_limit_reason is None             # type: ignore[attr-defined]

    moves = [json.loads(d) for (d,) in query(
        cfg, "SELECT detail FROM events WHERE kind = 'inflight_limit' AND subject = 'gpu0' "
             "ORDER BY id")]
    steps = [(m["from"], m["to"]) for m in moves]
    downs = [m for m in moves if m["to"] < m["from"]]
    ups = moves[len(downs):]
    # Down from the max to the floor (a step at a time, or to what SGLang ran when a
    # retraction had just taken some back), each move from where the last one left it;
    # then up one step (an eighth of 8: 1) per calm interval back to the max.
    assert moves[:len(downs)] == downs and downs and ups, steps
    assert all(b[0] == a[1] for a, b in zip(steps, steps[1:])), steps
    assert steps[0][0] == SLOTS and downs[-1]["to"] == FLOOR
    assert [(m["from"], m["to"]) for m in ups] == [(n, n + 1) for n in range(FLOOR, SLOTS)]
    assert all(m["max"] == SLOTS for m in moves)
    assert all("retracting" in m["reason"] for m in downs)
    assert all("calm for" in m["reason"] for m in ups)
    lines = [r.getMessage() for r in caplog.records if r.name == "supervisor.servers"]
    # The first move is logged as it was recorded (its target depends on what SGLang ran).
    assert f"gpu0: in-flight limit {SLOTS} -> {downs[0]['to']} of {SLOTS}: " in "\n".join(lines)
