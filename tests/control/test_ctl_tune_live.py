"""`ctl tune start/stop` and `status` against a real daemon on simulated servers: the daemon's
answer line, its refusal of a second search, the status report's tuning line while the
search is on, and the stop. Runs once the daemon has its tuner (supervisor/tune)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import control_daemon as daemon
from tests.fixtures.waiting import wait_until

pytest.importorskip("supervisor.tune.tuner", reason="the daemon's tuner is not in this tree")
pytestmark = pytest.mark.slow


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "supervisor", *args], capture_output=True,
                          text=True, timeout=60)


def test_tune_start_status_and_stop(tmp_path: Path) -> None:
    d = daemon.start(tmp_path / "job")
    try:
        ctl = ("ctl", "--socket", d.socket)
        r = cli(*ctl, "tune", "start", "--space", "max-running-requests=8,12", "--server",
                "gpu1", "--max-trials", "2", "--force")
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert r.stdout.startswith("tuner ") and "canary gpu1" in r.stdout
        assert "up to 2 trials over max-running-requests=8,12" in r.stdout
        again = cli(*ctl, "tune-start")
        assert again.returncode == 1 and "refused (409)" in again.stderr, again.stderr

        def tuning_line() -> str | None:
            out = cli("status", "--socket", d.socket).stdout
            return next((x for x in out.splitlines() if x.startswith("tuning   ")), None)
        line = wait_until(tuning_line, "a tuning line in status", 30.0, poll_s=0.5)
        # WAITING until the fleet is READY (no search yet: "0 trials"), then the baseline.
        assert line.split()[1] in ("WAITING,", "MEASURING,", "TRIAL,"), line
        assert "canary gpu1" in line and ("trials" in line or "trial 1/2" in line), line

        stop = cli(*ctl, "tune", "stop")
        assert stop.returncode == 0, (stop.stdout, stop.stderr)
        assert stop.stdout.startswith("tuner stopped (was ") and "after 0 trials" in stop.stdout
        stop_again = cli(*ctl, "tune-stop")
        assert stop_again.returncode == 1 and "refused (409)" in stop_again.stderr
    finally:
        d.stop()
