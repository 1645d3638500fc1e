"""Supervision on real processes: simulated SGLang servers as child processes, the real Job
(fleet, dispatcher, store, shards) in this process, faults injected through /sim/fault.

Each fault test runs one server, so the job can only finish if the server was restarted
after its fault; what it proves is read back from the state DB's audit events (read-only,
as an operator would) and the daemon's log lines.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from supervisor.job import Job
from supervisor.servers.server_state import ServerState

from .real_job import (assert_every_prompt_once, completed_on, job_config, run_job, sim_fault,
                       state_of, transitions, wait_fleet, wait_for)

pytestmark = pytest.mark.slow

S = ServerState

# What each fault must be called, and the settings that let it be noticed quickly: a hang
# by failed health probes (the progress watchdog kept slower so it cannot claim it first),
# a stall by the watchdog (probes keep answering 200).
FAULTS = {
    "crash": ({}, "crash"),
    "oom": ({}, "oom"),
    "hang": ({"health_interval_s": 0.1, "health_timeout_s": 0.3, "health_failures": 2,
              "hang_timeout_s": 20.0, "stop_grace_s": 0.5}, "hang"),
    "stall": ({"hang_timeout_s": 1.0}, "stall"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_fault_is_classified_restarted_and_the_job_finishes_exactly_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, fault: str) -> None:
    caplog.set_level(logging.INFO, logger="supervisor.servers")
    settings, kind = FAULTS[fault]
    prompts = 240
    cfg = job_config(tmp_path, servers=1, prompts=prompts, **settings)
    port = cfg.servers.base_port
    injected: dict[str, int] = {}

    async def inject(job: Job) -> None:
        await wait_fleet(job)
        # Mid-job, with every slot busy: the requests in flight must come back.
        await wait_for(lambda: completed_on(job, "gpu0") >= 40, "40 completions")
        injected["completed"] = completed_on(job, "gpu0")
        await sim_fault(port, fault)

    _, result = await run_job(cfg, inject)
    assert_every_prompt_once(cfg, result, prompts)
    assert injected["completed"] < prompts

    ts = transitions(cfg, "gpu0")
    path = [t.to for t in ts]
    assert path == ["STARTING", "READY", "STOPPING", "BACKOFF", "STARTING", "READY",
                    "STOPPING", "STOPPED"], path
    backoff = ts[3]
    assert backoff.detail["exit_kind"] == kind
    assert backoff.reason.startswith(f"{kind}: ")
    assert backoff.detail["failures_in_window"] == 1
    assert ts[4].reason == f"restart after {kind}"
    assert ts[5].detail["pid"] != ts[1].detail["pid"]
    # The daemon's log says the same, one line per transition.
    lines = [r.getMessage() for r in caplog.records if r.name == "supervisor.servers"]
    assert any(line.startswith(f"gpu0: STOPPING -> BACKOFF: {kind}: ") for line in lines), lines
    if fault == "crash":
        assert backoff.detail["exit_code"] == 1 and backoff.detail["signal"] is None
    elif fault == "oom":
        # SGLang's own words are the evidence, then the SIGKILL of its process tree.
        assert "out of memory" in backoff.detail["evidence"]
        assert backoff.detail["signal"] == 9
    elif fault == "hang":
        assert "health probe failed 2 times" in backoff.reason
        # It ignores SIGTERM (its loop is blocked): the group had to be killed.
        assert backoff.detail["group"] == "killed"
    else:
        assert "requests in flight, none completed" in backoff.reason
