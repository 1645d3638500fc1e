"""Supervision on real processes: simulated SGLang servers as child processes, the real Job
(fleet, dispatcher, store, shards) in this process, faults injected through /sim/fault.

Each fault test runs one server, so the job can only finish if the server was restarted
after its fault; what it proves is read back from the state DB's audit events (read-only,
as an operator would) and the daemon's log lines.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from supervisor.contract.pause_sources import PauseSource
from supervisor.job.main_loop import Job
from supervisor.job.status import JobStatus
from supervisor.servers.server_state import ServerState
from tests.fixtures.real_job import (
    WRAPPER,
    alive,
    assert_every_prompt_once,
    assert_nothing_left,
    completed_on,
    job_config,
    query,
    run_job,
    sim_fault,
    sim_state,
    state_of,
    transitions,
    wait_fleet,
    wait_for,
)

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
    cfg = job_config(tmp_path, servers=1, prompts=prompts, flags={"sim-children": 2}, **settings)
    port = cfg.servers.base_port
    injected: dict[str, int] = {}
    children: list[int] = []

    async def inject(job: Job) -> None:
        await wait_fleet(job)
        # Mid-job, with every slot busy: the requests in flight must come back.
        await wait_for(lambda: completed_on(job, "gpu0") >= 40, "40 completions")
        injected["completed"] = completed_on(job, "gpu0")
        children.extend((await sim_state(port))["children"])
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
        # SGLang's own account is the evidence (its traceback, then the launcher killing its
        # tree and itself by SIGKILL): a crash, never "maybe the kernel OOM killer".
        assert "Scheduler hit an exception" in backoff.detail["evidence"]
        assert "OOM killer" not in backoff.reason
    elif fault == "oom":
        # SGLang's own words are the evidence, then the SIGKILL of its process tree.
        assert "out of memory" in backoff.detail["evidence"]
        assert backoff.detail["signal"] == 9
    elif fault == "hang":
        assert "health probe failed 2 times" in backoff.reason
        # It ignores SIGTERM (its loop is blocked): the group had to be killed.
        assert backoff.detail["group"] == "killed" and backoff.detail["signal"] == 9
    else:
        assert "requests in flight, no token for" in backoff.reason
    assert len(children) == 2
    assert_nothing_left(cfg, children)


async def test_leader_killed_by_signal_9_leaves_children_the_group_stop_takes(
        tmp_path: Path) -> None:
    # The kernel's OOM killer picks one process: SGLang's launcher dies, its scheduler
    # children (holding the GPU's memory) live on in the process group until we stop it.
    prompts = 160
    cfg = job_config(tmp_path, servers=1, prompts=prompts, flags={"sim-children": 2})
    port = cfg.servers.base_port
    seen: dict[str, object] = {}

    async def kill_leader(job: Job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: completed_on(job, "gpu0") >= 40, "40 completions")
        children = (await sim_state(port))["children"]
        leader = fleet.servers["gpu0"].pid
        os.kill(leader, signal.SIGKILL)
        seen.update(children=children, leader=leader)
        await wait_for(lambda: state_of(job, "gpu0") is S.BACKOFF, "BACKOFF")
        seen["alive_after"] = [p for p in children if alive(p)]

    _, result = await run_job(cfg, kill_leader)
    assert_every_prompt_once(cfg, result, prompts)
    backoff = next(t for t in transitions(cfg, "gpu0") if t.to == "BACKOFF")
    assert backoff.detail["exit_kind"] == "crash" and backoff.detail["signal"] == 9
    assert "not by us" in backoff.reason
    # The children were still there when the leader died, so the group had to be stopped...
    assert backoff.detail["group"] in ("terminated", "killed")
    # ...and by BACKOFF (before the next start) none of them was left.
    assert seen["alive_after"] == []
    assert_nothing_left(cfg, seen["children"])  # type: ignore[arg-type]


async def test_server_failing_every_start_ends_failed_while_the_other_finishes(
        tmp_path: Path) -> None:
    # gpu1 is a "broken GPU": its server crashes while loading, at every start.
    prompts = 240
    cfg = job_config(tmp_path, servers=2, prompts=prompts, command=[sys.executable, str(WRAPPER)],
                     max_failures=2)
    env = {**os.environ, "SIM_BROKEN_GPUS": "1"}
    statuses: list[JobStatus] = []

    async def watch(job: Job) -> None:
        await wait_fleet(job)
        assert job.dispatcher is not None
        held = False
        # FAILED must come while gpu0 still has work; should gpu1 take unusually long to fail
        # three times, hold dispatch so the job cannot end before it does.
        while state_of(job, "gpu1") is not S.FAILED:
            status = job.last_status
            if not held and status is not None and status.remaining < prompts // 4:
                await job.dispatcher.pause(PauseSource.OPERATOR, "waiting for gpu1 to fail", "test")
                held = True
            await anyio.sleep(0.02)
        if held:
            await job.dispatcher.resume(PauseSource.OPERATOR, "test")

    _, result = await run_job(cfg, watch, base_env=env, on_status=statuses.append)
    assert_every_prompt_once(cfg, result, prompts)
    # From the moment it FAILED to the status that ended the job, it stayed FAILED: nobody
    # restarted it, and the job finished without it.
    states = [{s.name: s.state for s in st.servers}["gpu1"] for st in statuses]
    first = states.index(S.FAILED)
    assert set(states[first:]) == {S.FAILED}
    assert statuses[-1].finished and statuses[first].remaining > 0
    assert {s.name: s.failures_in_window for s in statuses[-1].servers}["gpu1"] == 3
    ts = transitions(cfg, "gpu1")
    assert [t.to for t in ts] == ["STARTING", "STOPPING", "BACKOFF"] * 2 + [
        "STARTING", "STOPPING", "FAILED", "STOPPED"], [t.to for t in ts]
    failed = ts[-2]
    assert failed.detail["exit_kind"] == "crash"
    assert "Scheduler hit an exception" in failed.detail["evidence"]
    assert failed.detail["failures_in_window"] == 3
    assert "waiting for an operator" in failed.reason
    delays = [t.detail["backoff_s"] for t in ts if t.to == "BACKOFF"]
    assert delays[1] > delays[0]               # exponential, within the jitter
    # The other server never stopped and did all the work.
    assert [t.to for t in transitions(cfg, "gpu0")] == ["STARTING", "READY", "STOPPING",
                                                        "STOPPED"]
    assert query(cfg, "SELECT server, count(*) FROM prompts GROUP BY server") == [("gpu0", prompts)]
    assert_nothing_left(cfg)
