"""The systemd launcher's parts that need no systemd: a server unit's process watched by pid
and create time, its end read from the record the unit's ExecStopPost writes (for this very
start only); `servers.launcher = "systemd"` refused in one line where it cannot work. The
units themselves run under a real systemd in tests/systemd/test_servers_outlive_daemon.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from supervisor.servers.launcher import template_installed
from supervisor.servers.launcher_choice import choose_launcher
from supervisor.servers.systemd_launcher import UnitProcess
from supervisor.servers.unit_spec import UnitExit, write_exit


def _unit_process(tmp_path: Path, invocation: str) -> tuple[subprocess.Popen[bytes], UnitProcess]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = psutil.Process(child.pid).create_time()
    proc = UnitProcess(child.pid, child.pid, ("python",), started, unit="dflash-sglang@gpu0.service",
                       invocation=invocation, exit_file=tmp_path / "gpu0.exit.json")
    return child, proc


def test_running_until_the_pid_is_gone_then_the_units_record(tmp_path: Path) -> None:
    child, proc = _unit_process(tmp_path, "inv-2")
    try:
        assert not proc.exited and proc.returncode is None
        # A record of an earlier start of the unit says nothing about this one.
        write_exit(tmp_path / "gpu0.exit.json", UnitExit("inv-1", "success", "exited", "0"))
        child.kill()
        child.wait(timeout=10)
        assert proc.exited
        assert proc.returncode is None and proc.result is None
        write_exit(tmp_path / "gpu0.exit.json", UnitExit("inv-2", "oom-kill", "killed", "KILL"))
        assert proc.returncode == -9 and proc.result == "oom-kill"
    finally:
        child.kill()
        child.wait(timeout=10)


def test_a_reused_pid_is_not_the_server(tmp_path: Path) -> None:
    child, proc = _unit_process(tmp_path, "inv")
    try:
        proc.started_at -= 100.0      # as if the pid now belonged to a newer process
        assert proc.exited
    finally:
        child.kill()
        child.wait(timeout=10)


@pytest.mark.skipif(template_installed(), reason="dflash-sglang@.service is installed here")
def test_systemd_asked_for_without_the_template_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as err:
        choose_launcher("systemd", {"INVOCATION_ID": "x"})
    assert "\n" not in str(err.value)
    assert "dflash-sglang@.service" in str(err.value) or "no systemctl" in str(err.value)
    # "auto" falls back to the daemon's own children instead.
    assert choose_launcher("auto", {"INVOCATION_ID": "x"}).kind == "process"
