"""The fleet against SGLang 0.5.23's behaviour, on real processes (the real Job, simulated
servers as child processes, read back from the state DB's audit events):

- flags refused by SGLang's parser (exit 2, argparse's line) fail that server at once;
- a port refusing connections while the model loads keeps the server STARTING;
- the dispatcher's slots come from /server_info when no --max-running-requests says;
- retraction lines under memory pressure never make a later crash an OOM.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from supervisor.job.main_loop import Job
from supervisor.servers.server_state import ServerState
from tests.fixtures.real_job import (
    assert_every_prompt_once,
    completed_on,
    job_config,
    run_job,
    sim_fault,
    state_of,
    transitions,
    wait_fleet,
    wait_for,
)

S = ServerState
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AMBIGUOUS = ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
             "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")


async def test_flags_refused_at_launch_fail_that_server_at_once_without_backoff(
        tmp_path: Path) -> None:
    # gpu1's launch exits 2 with argparse's line, as SGLang does for a flag it does not take.
    prompts = 120
    cfg = job_config(tmp_path, servers=2, prompts=prompts, max_failures=3,
                     command=[sys.executable, str(FIXTURES / "bad_flag_launch.py")])
    env = {**os.environ, "SIM_BAD_FLAG_GPUS": "1"}

    async def watch(job: Job) -> None:
        await wait_fleet(job)
        await wait_for(lambda: state_of(job, "gpu1") is S.FAILED, "gpu1 FAILED")

    _, result = await run_job(cfg, watch, base_env=env)
    assert_every_prompt_once(cfg, result, prompts)
    ts = transitions(cfg, "gpu1")
    # One start, no BACKOFF: restarting with the same flags cannot help.
    assert [t.to for t in ts] == ["STARTING", "STOPPING", "FAILED", "STOPPED"], ts
    failed = ts[2]
    assert failed.detail["exit_kind"] == "config" and failed.detail["exit_code"] == 2
    assert failed.detail["evidence"] == AMBIGUOUS
    assert failed.reason == (f"config: launch flags refused: {AMBIGUOUS}; restarting cannot "
                             "help, waiting for an operator")
    assert [t.to for t in transitions(cfg, "gpu0")] == ["STARTING", "READY", "STOPPING",
                                                        "STOPPED"]


async def test_the_simulator_refusing_a_renamed_flag_is_failed_at_once(tmp_path: Path) -> None:
    # The simulator parses SGLang 0.5.23's flags with 0.5.23's parser: the old
    # --cuda-graph-max-bs is ambiguous there, exit 2. Nothing to restart into: FAILED, one start.
    cfg = job_config(tmp_path, servers=1, prompts=10, flags={"cuda-graph-max-bs": 8})

    async def watch(job: Job) -> None:
        await wait_fleet(job)
        await wait_for(lambda: state_of(job, "gpu0") is S.FAILED, "gpu0 FAILED")
        job.request_stop("test over")

    await run_job(cfg, watch)
    ts = transitions(cfg, "gpu0")
    assert [t.to for t in ts] == ["STARTING", "STOPPING", "FAILED", "STOPPED"], ts
    assert ts[2].detail["exit_kind"] == "config" and ts[2].detail["evidence"] == AMBIGUOUS


async def test_a_launch_command_without_sglang_installed_is_failed_at_once(
        tmp_path: Path) -> None:
    # `python -m sglang.launch_server` where SGLang is not installed: Python's own line, exit
    # 1. Restarting cannot install it: FAILED after one start, the line as the evidence.
    cfg = job_config(tmp_path, servers=1, prompts=10,
                     command=[sys.executable, "-m", "dflash_absent_sglang.launch_server"])

    async def watch(job: Job) -> None:
        await wait_fleet(job)
        await wait_for(lambda: state_of(job, "gpu0") is S.FAILED, "gpu0 FAILED")
        job.request_stop("test over")

    await run_job(cfg, watch)
    ts = transitions(cfg, "gpu0")
    assert [t.to for t in ts] == ["STARTING", "STOPPING", "FAILED", "STOPPED"], ts
    assert ts[2].detail["exit_kind"] == "config" and ts[2].detail["exit_code"] == 1
    assert "No module named 'dflash_absent_sglang'" in ts[2].detail["evidence"]
    assert "the launch command cannot run" in ts[2].reason


async def test_refused_connections_while_loading_keep_the_server_starting(tmp_path: Path) -> None:
    prompts = 40
    cfg = job_config(tmp_path, servers=1, prompts=prompts,
                     command=[sys.executable, str(FIXTURES / "late_bind_launch.py")])
    port = cfg.servers.base_port
    refused: list[str] = []

    async def watch(job: Job) -> None:
        await wait_fleet(job)
        await wait_for(lambda: state_of(job, "gpu0") is S.STARTING, "STARTING")
        # What the daemon's own probes meet meanwhile: nothing listening.
        async with httpx.AsyncClient(trust_env=False) as client:
            try:
                await client.get(f"http://127.0.0.1:{port}/health_generate", timeout=5.0)
            except httpx.ConnectError as exc:
                refused.append(type(exc).__name__)

    _, result = await run_job(cfg, watch, base_env={**os.environ, "SIM_LATE_BIND_S": "1.5"})
    assert refused == ["ConnectError"]
    assert_every_prompt_once(cfg, result, prompts)
    assert [t.to for t in transitions(cfg, "gpu0")] == ["STARTING", "READY", "STOPPING",
                                                        "STOPPED"]


async def test_a_port_that_never_listens_is_a_startup_timeout_saying_so(tmp_path: Path) -> None:
    cfg = job_config(tmp_path, servers=1, prompts=10, startup_timeout_s=1.0,
                     command=[sys.executable, str(FIXTURES / "late_bind_launch.py")])

    async def watch(job: Job) -> None:
        await wait_fleet(job)
        await wait_for(lambda: state_of(job, "gpu0") is S.BACKOFF, "BACKOFF")
        job.request_stop("test over")

    await run_job(cfg, watch, base_env={**os.environ, "SIM_LATE_BIND_S": "never"})
    ts = transitions(cfg, "gpu0")
    assert [t.to for t in ts[:3]] == ["STARTING", "STOPPING", "BACKOFF"], ts
    assert ts[2].detail["exit_kind"] == "startup_timeout"
    assert ts[1].reason.startswith("/health_generate not 200 after 1 s (last probe: not "
                                   "accepting connections"), ts[1].reason


async def test_slots_come_from_server_info_without_the_flag_and_follow_retunes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A hybrid (mamba) model: the simulated SGLang caps its running requests at
    # max-mamba-cache-size // 3 = 12, and says so on /server_info.
    caplog.set_level(logging.INFO, logger="supervisor.servers")
    prompts = 400
    cfg = job_config(tmp_path, servers=1, prompts=prompts,
                     flags={"max-running-requests": None, "max-mamba-cache-size": 36})
    seen: dict[str, Any] = {}

    def limit(job: Job) -> int:
        assert job.fleet is not None
        endpoint = job.fleet.servers["gpu0"].ready.endpoint
        assert endpoint is not None
        return endpoint.max_running

    async def operate(job: Job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: completed_on(job, "gpu0") >= 24, "24 completions")
        seen["first"] = (limit(job), fleet.snapshot()[0].max_running)
        assert (await fleet.retune({"max-running-requests": 5}, None, "alice")).ok
        seen["flag"] = limit(job)
        # More than SGLang will run: its own figure wins, with a warning.
        assert (await fleet.retune({"max-running-requests": 64}, None, "alice")).ok
        seen["capped"] = limit(job)

    job, result = await run_job(cfg, operate)
    assert_every_prompt_once(cfg, result, prompts)
    assert seen == {"first": (12, 12), "flag": 5, "capped": 12}
    readies = [t for t in transitions(cfg, "gpu0") if t.to == "READY"]
    assert [(t.detail["max_running"], t.detail["slots_from"]) for t in readies] == [
        (12, "server"), (5, "flag"), (12, "server")]
    assert job.dispatcher is not None and job.dispatcher.progress("gpu0").peak_in_flight <= 12
    lines = [r.getMessage() for r in caplog.records if r.name == "supervisor.servers"]
    assert "gpu0: SGLang runs 12 requests at once (/server_info); dispatching as many" in lines
    assert ("gpu0: SGLang runs at most 12 requests at once (max-running-requests 64, capped by "
            "its memory pools); dispatching 12") in lines


@pytest.mark.slow
async def test_retractions_then_a_crash_is_a_crash_not_an_oom(tmp_path: Path) -> None:
    prompts = 240
    cfg = job_config(tmp_path, servers=1, prompts=prompts)
    port = cfg.servers.base_port

    async def inject(job: Job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: completed_on(job, "gpu0") >= 20, "20 completions")
        await sim_fault(port, "retract")
        await wait_for(lambda: any("KV cache pool is full. Retract requests." in line
                                   for line in fleet.recent_log("gpu0")), "a retraction")
        await sim_fault(port, "crash")

    _, result = await run_job(cfg, inject)
    assert_every_prompt_once(cfg, result, prompts)
    backoff = next(t for t in transitions(cfg, "gpu0") if t.to == "BACKOFF")
    assert backoff.detail["exit_kind"] == "crash", backoff.reason
    assert "Scheduler hit an exception" in backoff.detail["evidence"]
    assert "OOM killer" not in backoff.reason
