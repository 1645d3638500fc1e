"""Attached servers (`servers.attach`) in the real Job, on simulated SGLang servers that the
test starts itself, as a site's Slurm job or pod would: the daemon feeds and supervises
them like its own, but never launches, restarts or stops them. Killed mid-run, one is GONE
(one line), its requests go back to pending with no attempt counted, and the job goes on;
started again on the same port, it is READY again (one line) and the job finishes."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.job.main_loop import Job
from supervisor.servers.attached_server import NotOurs
from supervisor.servers.server_state import ServerState
from supervisor.sim.launch import kill_group, sim_argv, wait_healthy
from tests.fixtures.ports import free_port
from tests.fixtures.real_job import (
    SIM_FLAGS,
    SLOTS,
    alive,
    assert_every_prompt_once,
    expected_ids,
    in_flight_on,
    job_config,
    query,
    run_job,
    shard_ids,
    sim_fault,
    state_of,
    transitions,
    wait_fleet,
    wait_for,
)

pytestmark = pytest.mark.slow


def _sim_flags() -> list[str]:
    flags = ["--max-running-requests", str(SLOTS), "--enable-metrics"]
    for name, value in SIM_FLAGS.items():
        flags += [f"--{name}", str(value)]
    return flags


class ExternalSim:
    """A simulated SGLang server on a fixed port, started and stopped by the test only."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None
        self.lives: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.directory / f"ext-{self.port}-{len(self.lives)}.log", "wb")
        self.proc = subprocess.Popen(sim_argv(self.port, *_sim_flags()), stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()
        self.lives.append(self.proc)
        wait_healthy(self.url, self.proc)

    def kill(self) -> None:
        assert self.proc is not None
        kill_group(self.proc)
        self.proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.lives:
            if proc.poll() is None:
                kill_group(proc)
                proc.wait(timeout=10)


@pytest.fixture
def external(tmp_path: Path) -> Any:
    sims: list[ExternalSim] = []

    def make() -> ExternalSim:
        sim = ExternalSim(tmp_path)
        sims.append(sim)
        sim.start()
        return sim

    yield make
    for sim in sims:
        sim.stop_all()


def _lines(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "supervisor.servers" and r.getMessage().startswith(start)]


async def test_a_job_on_an_attached_server_alone(tmp_path: Path, external: Any) -> None:
    """count = 0: only the attached server; every prompt once, on ext0; the daemon's end
    leaves it running."""
    sim = await anyio.to_thread.run_sync(external)
    cfg = job_config(tmp_path / "job", servers=0, prompts=200, attach=[sim.url])
    _, result = await run_job(cfg, timeout_s=90)
    assert_every_prompt_once(cfg, result, 200)
    assert query(cfg, "SELECT DISTINCT server FROM prompts") == [("ext0",)]
    assert sim.proc is not None and sim.proc.poll() is None and alive(sim.proc.pid)
    steps = [(t.frm, t.to) for t in transitions(cfg, "ext0")]
    assert steps == [("STOPPED", "STARTING"), ("STARTING", "READY"), ("READY", "STOPPED")]
    ready = [t for t in transitions(cfg, "ext0") if t.to == "READY"][0]
    assert ready.detail["max_running"] == SLOTS and ready.detail["slots_from"] == "server"
    assert "runs on" in transitions(cfg, "ext0")[-1].reason
    # Nothing of it is recorded as a process of ours (a later daemon never adopts or stops it).
    assert query(cfg, "SELECT count(*) FROM server_processes") == [(0,)]


async def test_an_attached_server_killed_and_started_again(
        tmp_path: Path, external: Any, caplog: pytest.LogCaptureFixture) -> None:
    """One own server and one attached: the attached one is killed mid-run (GONE, one line,
    requests requeued with no attempt counted, the job goes on on gpu0), then started again
    on its port (READY, one line); an operator's restart of it is refused; the job
    finishes with every prompt once, and the attached server is left running."""
    sim = await anyio.to_thread.run_sync(external)
    cfg = job_config(tmp_path / "job", servers=1, prompts=900, attach=[sim.url])
    seen: dict[str, Any] = {}

    async def drive(job: Job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: state_of(job, "ext0") is ServerState.READY
                       and state_of(job, "gpu0") is ServerState.READY
                       and in_flight_on(job, "ext0") > 0, "both busy")
        # Refused, at the fleet and at the control socket's actions.
        with pytest.raises(NotOurs, match="ext0 is attached"):
            await fleet.restart("ext0", "operator")
        with pytest.raises(NotOurs):
            await fleet.reset("ext0", "operator")
        result = await fleet.restart(None, "operator")     # all: the daemon's own only
        assert result.ok and result.restarted == ("gpu0",)
        await wait_for(lambda: in_flight_on(job, "ext0") > 0, "ext0 busy again")
        seen["done_before"] = query(cfg, "SELECT count(*) FROM prompts WHERE status='done'")[0][0]
        await anyio.to_thread.run_sync(sim.kill)
        await wait_for(lambda: state_of(job, "ext0") is ServerState.GONE, "ext0 GONE", 10)
        snap = {s.name: s for s in fleet.snapshot()}["ext0"]
        seen["gone"] = snap
        await wait_for(lambda: in_flight_on(job, "ext0") == 0, "ext0's requests requeued")
        # The job goes on with gpu0 while ext0 is away.
        done = query(cfg, "SELECT count(*) FROM prompts WHERE status='done'")[0][0]
        await wait_for(lambda: query(cfg, "SELECT count(*) FROM prompts WHERE status='done'"
                                     )[0][0] > done + 20, "gpu0 goes on")
        assert state_of(job, "ext0") is ServerState.GONE
        await anyio.to_thread.run_sync(sim.start)
        await wait_for(lambda: state_of(job, "ext0") is ServerState.READY, "ext0 READY again",
                       15)
        await wait_for(lambda: in_flight_on(job, "ext0") > 0, "ext0 fed again")

    with caplog.at_level(logging.INFO, logger="supervisor.servers"):
        _, result = await run_job(cfg, drive, timeout_s=120)
    assert_every_prompt_once(cfg, result, 900)
    gone = seen["gone"]
    assert gone.state is ServerState.GONE and gone.attached_url == sim.url
    assert gone.restarts == 0 and gone.pid is None and gone.gpus == ()
    assert gone.state_reason.startswith("unreachable since ")
    # Said by the port check ("Connection refused") or, under load, by the health probes
    # that got there first ("not accepting connections"): unreachable either way.
    assert "refused" in gone.state_reason or "not accepting connections" in gone.state_reason
    went = _lines(caplog, "ext0: READY -> GONE")
    back = _lines(caplog, "ext0: GONE -> READY")
    assert len(went) == 1 and len(back) == 1, went + back
    assert [(t.frm, t.to) for t in transitions(cfg, "ext0")] == [
        ("STOPPED", "STARTING"), ("STARTING", "READY"), ("READY", "GONE"), ("GONE", "READY"),
        ("READY", "STOPPED")]
    # Both lives of the attached server answered; gpu0 was restarted by the operator's
    # "restart all", ext0 never.
    lives = dict(query(cfg, "SELECT server, count(*) FROM prompts GROUP BY server"))
    assert lives["ext0"] > 0 and lives["gpu0"] > 0
    drained = [t.subject for t in transitions(cfg) if t.to == "DRAINING"]
    assert drained == ["gpu0"]
    assert sim.proc is not None and sim.proc.poll() is None, "the daemon stopped ext0"


async def test_an_attached_server_that_stops_making_progress_is_gone_until_it_serves(
        tmp_path: Path, external: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A stalled scheduler (no token for anyone, health failing later): GONE by the token
    rule or the health rule, never restarted; lifted, it is READY again and the job ends
    with every prompt answered once."""
    sim = await anyio.to_thread.run_sync(external)
    cfg = job_config(tmp_path / "job", servers=0, prompts=300, attach=[sim.url],
                     hang_timeout_s=2.0)
    seen: dict[str, Any] = {}

    async def drive(job: Job) -> None:
        await wait_for(lambda: job.fleet is not None
                       and state_of(job, "ext0") is ServerState.READY
                       and in_flight_on(job, "ext0") > 0, "ext0 busy")
        await sim_fault(sim.port, "stall")
        await wait_for(lambda: state_of(job, "ext0") is ServerState.GONE, "ext0 GONE", 20)
        assert job.fleet is not None
        seen["reason"] = job.fleet.servers["ext0"].transitions.reason
        await sim_fault(sim.port, "none")
        await wait_for(lambda: state_of(job, "ext0") is ServerState.READY, "ext0 READY", 20)

    with caplog.at_level(logging.INFO, logger="supervisor.servers"):
        _, result = await run_job(cfg, drive, timeout_s=120)
    assert result.finished, result.reason
    assert sorted(shard_ids(cfg)) == expected_ids(300)
    assert seen["reason"].startswith(("hung since ", "unhealthy since ")), seen["reason"]
    assert "its requests in flight went back to pending" in seen["reason"]
    assert len(_lines(caplog, "ext0: READY -> GONE")) >= 1
    assert not [t for t in transitions(cfg, "ext0") if t.to in ("STOPPING", "DRAINING")]
    assert sim.proc is not None and sim.proc.poll() is None
