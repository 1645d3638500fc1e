"""Adoption in the real Job (in-process, on simulated SGLang servers): a daemon that stops
with `keep_servers_on_exit` leaves its servers to the next one; servers whose flags differ
from the next daemon's config are adopted and replaced by a rolling restart, one at a
time; a process that is not proven this job's is never adopted nor touched."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path

import anyio
import psutil
import pytest

from state.settings_keys import Setting
from supervisor.config.load import with_flags
from supervisor.job.main_loop import Job
from supervisor.job.store_setup import open_job_store
from supervisor.servers.adoption import TOKEN_ENV
from supervisor.servers.launch_command import build_specs
from supervisor.servers.server_state import ServerState
from supervisor.sim.launch import wait_healthy
from tests.fixtures.real_job import (
    alive,
    assert_every_prompt_once,
    job_config,
    query,
    run_job,
    state_of,
    transitions,
    wait_fleet,
    wait_for,
)

pytestmark = pytest.mark.slow


def _reap(job: Job) -> None:
    """The first job's servers were the test process's own children: reap them once the
    second job has stopped them."""
    assert job.fleet is not None
    for server in job.fleet.servers.values():
        proc = server._proc
        if proc is not None and proc.popen is not None:
            proc.popen.wait(timeout=30)


async def test_servers_left_by_a_stop_are_adopted_and_other_flags_rolled(
        tmp_path: Path) -> None:
    cfg = job_config(tmp_path, servers=2, prompts=600)

    async def stop_keeping_servers(job: Job) -> None:
        await wait_fleet(job)
        await wait_for(lambda: query(cfg, "SELECT count(*) FROM prompts WHERE status = 'done'"
                                     )[0][0] >= 60, "60 prompts done")
        assert job.fleet is not None
        job.fleet.keep_servers_on_exit = True     # the hook a systemd restart sets
        job.request_stop("test")

    first, result = await run_job(cfg, stop_keeping_servers)
    assert not result.finished
    kept = {n: pid for n, pid in query(cfg, "SELECT name, pid FROM server_processes")}
    assert sorted(kept) == ["gpu0", "gpu1"] and all(alive(p) for p in kept.values())
    assert not [t for t in transitions(cfg) if t.to == "STOPPING"]

    # The next daemon asks for other flags: it adopts both, then rolls them one at a time.
    second_cfg = with_flags(cfg, {"max-running-requests": 6})
    second, result = await run_job(second_cfg, timeout_s=120)
    _reap(first)
    assert_every_prompt_once(second_cfg, result, 600)
    adopted = {d["pid"]: d for d in (json.loads(r[0]) for r in query(
        cfg, "SELECT detail FROM events WHERE kind = 'server_adopted'"))}
    assert sorted(adopted) == sorted(kept.values())
    assert all(d["roll"] for d in adopted.values())
    # The second daemon's transitions, from its first adopted start to its shutdown.
    every = transitions(cfg)
    begin = next(i for i, t in enumerate(every) if t.detail.get("adopted"))
    steps = [(t.subject, t.to, t.reason) for t in every[begin:]
             if "supervisor shutting down" not in t.reason]
    # One at a time: the second server is drained only once the first serves again.
    drains = [i for i, step in enumerate(steps) if step[1] == "DRAINING"]
    assert len(drains) == 2, "\n".join(map(str, steps))
    first_rolled = steps[drains[0]][0]
    back = [i for i, (n, to, _) in enumerate(steps) if n == first_rolled and to == "READY"]
    assert back[0] < drains[0] < back[1] < drains[1], steps
    for name, pid in kept.items():
        assert not alive(pid)
        starts = [t for t in transitions(cfg, name) if t.to == "STARTING"]
        assert [t.detail["pid"] for t in starts if t.detail.get("adopted")] == [pid]
        argv = starts[-1].detail["argv"]
        assert argv[argv.index("--max-running-requests") + 1] == "6"
        reason = [t for t in transitions(cfg, name) if t.to == "DRAINING"][0].reason
        assert reason == "adopted with flags that differ from the config's by supervisor"


def _foreign_server(cfg: object, token: str) -> tuple[subprocess.Popen[bytes], list[str]]:
    """A server on gpu0's port, launched exactly as the config would launch it, but with
    another job's token (or none)."""
    spec = build_specs(cfg.servers)[0]  # type: ignore[attr-defined]
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env["CUDA_VISIBLE_DEVICES"] = "0"
    env[TOKEN_ENV] = token
    proc = subprocess.Popen(list(spec.argv), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    wait_healthy(f"http://127.0.0.1:{spec.port}", proc, 30)
    return proc, list(spec.argv)


def _record(cfg: object, name: str, pid: int, argv: list[str], started_at: float,
            token: str) -> None:
    """What the state DB of the job would say: made before the daemon's first start."""
    store = open_job_store(cfg)  # type: ignore[arg-type]
    try:
        store.record_server_process(name, pid, pid, argv, started_at)
        store.set_setting(Setting.JOB_TOKEN, token)
    finally:
        store.close_for_readers()


async def _until_failed(job: Job) -> None:
    await wait_fleet(job)
    await wait_for(lambda: state_of(job, "gpu0") is ServerState.FAILED, "gpu0 FAILED")
    job.request_stop("test")


@pytest.mark.parametrize("case", ["other token", "reused pid"])
async def test_a_foreign_server_on_the_port_is_never_adopted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str) -> None:
    cfg = job_config(tmp_path, servers=1, prompts=20)
    foreign, argv = await anyio.to_thread.run_sync(_foreign_server, cfg, "f" * 32)
    try:
        created = psutil.Process(foreign.pid).create_time()
        if case == "other token":
            # Recorded by this job's DB as if ours (a DB copied from another node), with
            # the same pid, start time and command line: only the token tells.
            await anyio.to_thread.run_sync(_record, cfg, "gpu0", foreign.pid, argv, created,
                                           "0" * 32)
        else:
            # The recorded pid is now another program's (another start time).
            await anyio.to_thread.run_sync(_record, cfg, "gpu0", foreign.pid, argv,
                                           created - 3600, "0" * 32)
        with caplog.at_level(logging.INFO, logger="supervisor.servers"):
            job, result = await run_job(cfg, _until_failed)
        assert foreign.poll() is None, "a foreign server was stopped"
        lines = [r.getMessage() for r in caplog.records if r.name == "supervisor.servers"]
        assert not [m for m in lines if "adopting pid" in m and "not adopting" not in m]
        if case == "other token":
            refused = [m for m in lines if m.startswith(f"gpu0: not adopting pid {foreign.pid}")]
            assert len(refused) == 1 and f"its {TOKEN_ENV} is not this job's" in refused[0]
            assert "supervisor.sim" in refused[0]
            assert query(cfg, "SELECT count(*) FROM events WHERE kind = 'adoption_refused'"
                         ) == [(1,)]
        failed = [t for t in transitions(cfg, "gpu0") if t.to == "FAILED"]
        assert len(failed) == 1
        assert f"port {cfg.servers.base_port} is in use by pid {foreign.pid}" in failed[0].reason
        assert query(cfg, "SELECT count(*) FROM events WHERE kind = 'server_adopted'") == [(0,)]
    finally:
        foreign.kill()
        foreign.wait()


async def test_an_operators_restart_restarts_an_adopted_server(tmp_path: Path) -> None:
    cfg = job_config(tmp_path, servers=2, prompts=600)

    async def stop_keeping_servers(job: Job) -> None:
        await wait_fleet(job)
        await wait_for(lambda: query(cfg, "SELECT count(*) FROM prompts WHERE status = 'done'"
                                     )[0][0] >= 30, "30 prompts done")
        assert job.fleet is not None
        job.fleet.keep_servers_on_exit = True
        job.request_stop("test")

    first, _ = await run_job(cfg, stop_keeping_servers)
    kept = {n: pid for n, pid in query(cfg, "SELECT name, pid FROM server_processes")}

    async def restart_gpu0(job: Job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: all(s.state is ServerState.READY
                                   for s in fleet.servers.values()), "both adopted READY")
        assert {n: s.pid for n, s in fleet.servers.items()} == kept
        result = await fleet.restart("gpu0", "operator")
        assert result.ok, result.reason
        assert fleet.servers["gpu0"].pid != kept["gpu0"]
        assert fleet.servers["gpu1"].pid == kept["gpu1"]

    second, result = await run_job(cfg, restart_gpu0, timeout_s=120)
    _reap(first)
    assert_every_prompt_once(cfg, result, 600)
    assert not alive(kept["gpu0"]) and not alive(kept["gpu1"])
    adopted = [json.loads(r[0]) for r in query(
        cfg, "SELECT detail FROM events WHERE kind = 'server_adopted'")]
    assert sorted(d["pid"] for d in adopted) == sorted(kept.values())
    assert not any(d["roll"] for d in adopted)
    drained = [t for t in transitions(cfg, "gpu0") if t.to == "DRAINING"]
    assert [t.actor for t in drained] == ["operator"]
