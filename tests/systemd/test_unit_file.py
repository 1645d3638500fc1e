"""The unit file: valid for systemd, and it says what the daemon relies on."""

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "dflash-supervisor.service"


def _service() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in systemd
    parser.read_string(UNIT.read_text())
    return parser["Service"]


def test_unit_declares_notify_mixed_kill_and_oom_policy():
    s = _service()
    assert s["Type"] == "notify"
    assert s["KillMode"] == "mixed"      # SIGTERM to the daemon; it stops its servers itself
    assert s["OOMPolicy"] == "continue"  # a server OOM-killed is the daemon's to restart
    for key in ("RuntimeDirectory", "StateDirectory", "LogsDirectory", "ConfigurationDirectory"):
        assert s[key] == "dflash-supervisor"
    assert "run --config /etc/dflash-supervisor/job.toml" in s["ExecStart"]
    assert int(s["WatchdogSec"]) > 0


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    # verify insists that ExecStart's binary exists: point it at this environment's script.
    script = Path(sys.executable).parent / "dflash-supervisor"
    if not script.exists():
        pytest.skip(f"{script} not installed (pip install -e .)")
    text = UNIT.read_text().replace("/opt/dflash-supervisor/bin/dflash-supervisor", str(script))
    unit = tmp_path / "dflash-supervisor.service"
    unit.write_text(text)
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # Warnings about this unit (not about the host's other units) count as failures too.
    mine = [line for line in out.stderr.splitlines() if "dflash-supervisor.service" in line]
    assert not mine, mine
