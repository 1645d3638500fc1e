"""The job's parts are wired by type, with no silent fallbacks: a broken uploads install
stops `run` with one line instead of running a job that uploads nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fixtures import control_daemon as daemon
from tests.fixtures.job_toml import write_toml


def test_a_broken_boto3_stops_run_with_one_line(tmp_path: Path) -> None:
    job = tmp_path / "job"
    data = daemon.config_dict(job, servers=1, prompts=20)
    data["job"]["output"] = "s3://bucket/prefix/"
    write_toml(job / "job.toml", data)
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "boto3.py").write_text("raise ImportError('boto3 is damaged')\n")
    r = subprocess.run([sys.executable, "-m", "supervisor", "run", "--config",
                        str(job / "job.toml")], capture_output=True, text=True, timeout=60,
                       env={"PYTHONPATH": str(shadow), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "dflash-supervisor: broken installation: boto3 is damaged")
    assert "Traceback" not in r.stderr
    assert not (job / "control.sock").exists()
    # Nothing was started: no server, no request, no result.
    assert not (job / "logs").exists() or not list((job / "logs").iterdir())


def test_server_states_are_compared_as_enums() -> None:
    """No string comparison of states left in the job's code (a renamed state would
    silently never match)."""
    root = Path(__file__).resolve().parents[2] / "supervisor"
    offenders = [str(p) for p in root.rglob("*.py")
                 if 'str(s.state) ==' in p.read_text() or '== "FAILED"' in p.read_text()
                 or '== "READY"' in p.read_text()]
    assert offenders == []
