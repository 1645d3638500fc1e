"""Over-commit on a real job: the Job in-process, simulated SGLang servers run with
--enable-metrics as child processes. A server sent more requests than it has slots
queues the rest; SGLang's own /metrics says so, the server is flagged, and the flag is
said once in the log and once in the events table, then ended when the server stops."""

from __future__ import annotations

import json
import logging
import re
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
    assert_every_prompt_once,
    job_config,
    query,
    run_job,
    wait_fleet,
    wait_for,
)

# The whole Job on simulated servers: an end-to-end test (the slow tier).
pytestmark = pytest.mark.slow


def _events(cfg: object, kind: str) -> list[tuple[str, dict]]:
    return [(subject, json.loads(detail)) for subject, detail in query(
        cfg, "SELECT subject, detail FROM events WHERE kind = ? ORDER BY id", kind)]  # type: ignore[arg-type]


def _status(sock: str) -> Status:
    with ControlClient(sock) as client:
        return client.status()


async def test_a_server_sent_more_than_it_runs_is_flagged_over_committed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="supervisor.servers")
    prompts = 400
    cfg = job_config(tmp_path, servers=1, prompts=prompts, flags={"enable-metrics": True})
    # Twice the server's slots in flight: SGLang queues the other half.
    cfg = replace(cfg, dispatch=replace(cfg.dispatch, max_in_flight_per_server=2 * SLOTS))
    seen: dict[str, object] = {}

    async def watch(job: Job) -> None:
        fleet = await wait_fleet(job)
        monitor = fleet.servers["gpu0"].ready.sglang
        await wait_for(lambda: monitor.view.overcommitted, "the over-commit flag")
        seen["view"] = monitor.view
        # What a client of the control socket reads while the flag is on.
        sock = str(cfg.path(cfg.control.socket))
        with anyio.fail_after(20):
            while True:
                status = await anyio.to_thread.run_sync(_status, sock)
                if status.servers[0].overcommitted:
                    break
                await anyio.sleep(0.05)
        seen["status"] = status
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=sock),
                                     trust_env=False) as client:
            seen["metrics"] = (await client.get("http://daemon/metrics", timeout=10)).text

    job, result = await run_job(cfg, watch)
    assert_every_prompt_once(cfg, result, prompts)

    view = seen["view"]
    assert view.polled and view.error is None                       # type: ignore[attr-defined]
    assert view.running is not None and view.running <= SLOTS       # type: ignore[attr-defined]
    assert "queue" in (view.overcommit_reason or "")                # type: ignore[attr-defined]
    # More of ours in flight than SGLang runs: up to twice its slots (a slot refilling at the
    # poll leaves one fewer: "running 8 of our 15" on a loaded CI machine).
    said = re.search(r"running (\d+) of our (\d+) in flight",
                     view.overcommit_reason or "")                 # type: ignore[attr-defined]
    assert said is not None, view.overcommit_reason                 # type: ignore[attr-defined]
    assert int(said[1]) <= SLOTS < int(said[2]) <= 2 * SLOTS, said[0]

    srv = seen["status"].servers[0]                                 # type: ignore[attr-defined]
    assert srv.sglang_metrics and srv.overcommitted and "queue" in srv.overcommit_reason
    assert srv.sglang_running is not None and srv.sglang_running <= SLOTS
    assert srv.sglang_queued is not None and srv.sglang_queued > 0
    assert srv.token_usage is not None and srv.gen_throughput is not None
    families = {f.name: f for f in text_string_to_metric_families(seen["metrics"])}  # type: ignore[arg-type]
    over = families["dflash_server_overcommitted"].samples
    assert [(x.labels["server"], x.value) for x in over] == [("gpu0", 1.0)]
    assert families["dflash_server_sglang_running_requests"].samples[0].value <= SLOTS

    events = _events(cfg, "server_overcommit")
    assert [(s, d["overcommitted"]) for s, d in events][:1] == [("gpu0", True)]
    # On and off alternate, and the last one is off: the server's end ends the flag.
    ons = [d["overcommitted"] for _, d in events]
    assert ons == [True, False] * (len(ons) // 2) and ons[-1] is False, ons
    assert events[0][1]["in_flight"] <= 2 * SLOTS
    lines = [r.getMessage() for r in caplog.records if r.name == "supervisor.servers"]
    assert sum(line.startswith("gpu0: over-committed: ") for line in lines) == ons.count(True)
    # After the job, nothing is left flagged.
    assert not job.fleet.servers["gpu0"].ready.sglang.view.overcommitted  # type: ignore[union-attr]


async def test_a_server_with_slots_for_all_we_send_is_never_flagged(tmp_path: Path) -> None:
    prompts = 200
    cfg = job_config(tmp_path, servers=1, prompts=prompts, flags={"enable-metrics": True})
    polled: list[int] = []

    async def watch(job: Job) -> None:
        fleet = await wait_fleet(job)
        monitor = fleet.servers["gpu0"].ready.sglang
        await wait_for(lambda: monitor.view.running is not None and monitor.view.running > 0,
                       "a poll that sees requests running")
        polled.append(monitor.view.running or 0)

    _, result = await run_job(cfg, watch)
    assert_every_prompt_once(cfg, result, prompts)
    assert 0 < polled[0] <= SLOTS
    assert _events(cfg, "server_overcommit") == []
