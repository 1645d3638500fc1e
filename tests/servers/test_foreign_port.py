"""Our servers only: a port held by another program is refused before launch (FAILED naming
the holder's pid and command line, no restart loop), and a server whose port is answered by
a foreign process is never READY, so no foreign answer is ever written as ours."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from supervisor.gpu.fake_source import FakeGpuSource
from supervisor.job.main_loop import Job
from supervisor.servers.port_owner import port_holder, served_by_group
from supervisor.sim.launch import sim_argv, wait_healthy
from tests.fixtures.real_job import fast_fleet, job_config, transitions

pytestmark = pytest.mark.slow

SQUAT = Path(__file__).parents[1] / "fixtures" / "squatting_launch.py"


def _run_until_all_failed(config, base_env=None):
    job = Job(config, fleet_options=fast_fleet(base_env), exit_when_paused=True,
              status_interval_s=0.05, gpu_source=FakeGpuSource(count=1), handle_signals=False)

    async def main():
        with anyio.fail_after(60):
            return await job.run()

    return anyio.run(main)


def test_a_port_held_by_another_program_is_refused_before_launch(tmp_path: Path):
    config = job_config(tmp_path / "job", servers=1, prompts=20)
    port = config.servers.base_port
    foreign = subprocess.Popen(sim_argv(port), start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", foreign)
        holder = port_holder("127.0.0.1", port)
        assert holder is not None and holder.pid == foreign.pid
        assert not served_by_group(port, os.getpgid(os.getpid()))
        result = _run_until_all_failed(config)
    finally:
        os.killpg(foreign.pid, signal.SIGKILL)
        foreign.wait(timeout=10)
    assert result.reason.startswith("every server FAILED")
    assert result.status.done == 0
    moves = transitions(config, "gpu0")
    assert [(t.frm, t.to) for t in moves[:2]] == [("STOPPED", "STARTING"), ("STARTING", "FAILED")]
    assert sum(t.to == "STARTING" for t in moves) == 1          # no restart loop
    reason = moves[1].reason
    assert f"port {port} is in use by pid {foreign.pid} (" in reason and "supervisor.sim" in reason
    assert port_holder("127.0.0.1", port) is None


def test_a_foreign_process_answering_on_our_port_never_makes_us_ready(tmp_path: Path):
    pid_file = tmp_path / "squatter.pid"
    config = job_config(tmp_path / "job", servers=1, prompts=20,
                        command=[sys.executable, str(SQUAT)])
    try:
        result = _run_until_all_failed(config, {**os.environ, "SQUATTER_PID_FILE": str(pid_file)})
    finally:
        if pid_file.exists():
            squatter = int(pid_file.read_text())
            try:
                os.killpg(squatter, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert result.reason.startswith("every server FAILED")
    assert result.status.done == 0
    moves = transitions(config, "gpu0")
    assert not any(t.to == "READY" for t in moves)
    failed = [t for t in moves if t.to == "FAILED"]
    assert len(failed) == 1 and sum(t.to == "STARTING" for t in moves) == 1
    assert f"pid {squatter}" in failed[0].reason
    assert "answered the health probe instead of our server" in failed[0].reason
