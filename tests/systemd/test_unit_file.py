"""The unit file and the sysusers file: valid for systemd, hardened in ways CUDA survives,
and saying what the daemon relies on."""

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SYSTEMD_DIR = Path(__file__).resolve().parents[2] / "systemd"
UNIT = SYSTEMD_DIR / "dflash-supervisor.service"
SYSUSERS = SYSTEMD_DIR / "dflash-supervisor.sysusers"
# The README's figure; the test fails if a change makes the unit more exposed than this.
MAX_EXPOSURE = "2.5"


def _service() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in systemd
    parser.read_string(UNIT.read_text())
    return parser["Service"]


def _unit_for_this_checkout(tmp_path: Path) -> Path:
    # verify insists that ExecStart's binary exists: point it at this environment's script.
    script = Path(sys.executable).parent / "dflash-supervisor"
    if not script.exists():
        pytest.skip(f"{script} not installed (pip install -e .)")
    text = UNIT.read_text().replace("/opt/dflash-supervisor/bin/dflash-supervisor", str(script))
    unit = tmp_path / "dflash-supervisor.service"
    unit.write_text(text)
    return unit


def test_unit_declares_notify_mixed_kill_and_oom_policy():
    s = _service()
    assert s["Type"] == "notify"
    assert s["KillMode"] == "mixed"      # SIGTERM to the daemon; it stops its servers itself
    assert s["OOMPolicy"] == "continue"  # a server OOM-killed is the daemon's to restart
    for key in ("RuntimeDirectory", "StateDirectory", "LogsDirectory", "ConfigurationDirectory"):
        assert s[key] == "dflash-supervisor"
    assert "run --config /etc/dflash-supervisor/job.toml" in s["ExecStart"]
    assert int(s["WatchdogSec"]) > 0
    assert s["ExecReload"] == "/bin/kill -HUP $MAINPID"


def test_stop_timeout_covers_the_drain_grace_and_the_server_stop():
    from supervisor.config import DispatchSection, ServersSection
    needed = DispatchSection().stop_grace_s + ServersSection().stop_grace_s
    assert int(_service()["TimeoutStopSec"]) > needed


def test_unit_is_hardened_without_hiding_the_gpus():
    s = _service()
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict",
                       "ProtectHome": "yes", "PrivateTmp": "yes",
                       "ProtectKernelTunables": "yes"}.items():
        assert s[key] == value, key
    assert set(s["RestrictAddressFamilies"].split()) == {
        "AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}
    assert int(s["LimitNOFILE"]) >= 65536
    # Each of these closes the device list or hides /dev: /dev/nvidia* would be gone.
    for key in ("PrivateDevices", "DevicePolicy", "DeviceAllow", "ProtectClock",
                "MemoryDenyWriteExecute", "ProcSubset"):
        assert key not in s, f"{key} breaks CUDA"
    # With ProtectSystem=strict only these are writable: state, logs, runtime (the spool
    # and the model caches live under the state directory).
    assert "ReadOnlyPaths" not in s and "InaccessiblePaths" not in s


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    unit = _unit_for_this_checkout(tmp_path)
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # Warnings about this unit (not about the host's other units) count as failures too.
    mine = [line for line in out.stderr.splitlines() if "dflash-supervisor.service" in line]
    assert not mine, mine


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_security_exposure_stays_at_the_readme_figure(tmp_path):
    unit = _unit_for_this_checkout(tmp_path)
    out = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                          f"--threshold={int(float(MAX_EXPOSURE) * 10)}", unit.name],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    if "Unknown command verb" in out.stderr or "unrecognized option" in out.stderr:
        pytest.skip("this systemd-analyze has no offline security check")
    last = [line for line in out.stdout.splitlines() if "Overall exposure" in line]
    assert out.returncode == 0, last or out.stderr
    readme = (SYSTEMD_DIR.parent / "README.md").read_text()
    assert f"after: **{last[0].split(': ')[1].split()[0]}" in readme, last


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None,
                    reason="systemd-sysusers not installed")
def test_sysusers_creates_the_service_user_in_the_gpu_groups(tmp_path):
    (tmp_path / "etc").mkdir()
    out = subprocess.run(["systemd-sysusers", f"--root={tmp_path}", str(SYSUSERS)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    users = {line.split(":")[0]: line.split(":") for line in
             (tmp_path / "etc/passwd").read_text().splitlines()}
    groups = {line.split(":")[0]: line.split(":") for line in
              (tmp_path / "etc/group").read_text().splitlines()}
    user = users["dflash"]
    assert user[3] == groups["dflash"][2]             # primary group dflash
    assert user[5] == "/var/lib/dflash-supervisor"    # home = the StateDirectory (caches)
    for gpu_group in ("video", "render"):
        assert "dflash" in groups[gpu_group][3].split(","), gpu_group
