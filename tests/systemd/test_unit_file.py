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
TEMPLATE = SYSTEMD_DIR / "dflash-sglang@.service"
POLKIT_RULE = SYSTEMD_DIR / "50-dflash-supervisor.rules"
SYSUSERS = SYSTEMD_DIR / "dflash-supervisor.sysusers"
# docs/systemd.md's figure; the test fails if a change makes the unit more exposed than this.
MAX_EXPOSURE = "2.5"


def _section(path: Path, name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in systemd
    parser.read_string(path.read_text())
    return parser[name]


def _service() -> configparser.SectionProxy:
    return _section(UNIT, "Service")


def _unit_for_this_checkout(tmp_path: Path, source: Path = UNIT,
                            name: str = "dflash-supervisor.service") -> Path:
    # verify insists that ExecStart's binary exists: point it at this environment's script.
    script = Path(sys.executable).parent / "dflash-supervisor"
    if not script.exists():
        pytest.skip(f"{script} not installed (pip install -e .)")
    text = source.read_text().replace("/opt/dflash-supervisor/bin/dflash-supervisor",
                                      str(script))
    unit = tmp_path / name
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
def test_security_exposure_stays_at_the_docs_figure(tmp_path):
    unit = _unit_for_this_checkout(tmp_path)
    out = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                          f"--threshold={int(float(MAX_EXPOSURE) * 10)}", unit.name],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    if "Unknown command verb" in out.stderr or "unrecognized option" in out.stderr:
        pytest.skip("this systemd-analyze has no offline security check")
    last = [line for line in out.stdout.splitlines() if "Overall exposure" in line]
    assert out.returncode == 0, last or out.stderr
    page = (SYSTEMD_DIR.parent / "docs" / "systemd.md").read_text()
    assert f"after: **{last[0].split(': ')[1].split()[0]}" in page, last


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


# -- the server template (dflash-sglang@.service) and its polkit rule ----------------------------

# Keys that say what the unit is, not how it is confined: they differ between the two units.
_OWN_KEYS = {"Type", "NotifyAccess", "ExecStart", "ExecStopPost", "ExecReload", "KillMode",
             "TimeoutStopSec", "OOMPolicy", "WatchdogSec", "Restart", "RestartSec",
             "RestartPreventExitStatus", "RuntimeDirectory", "RuntimeDirectoryMode",
             "ConfigurationDirectory"}


def test_template_runs_serve_server_outside_the_daemons_life():
    s = _section(TEMPLATE, "Service")
    spec = "%S/dflash-supervisor/servers/%i.json"
    assert s["ExecStart"] == f"/opt/dflash-supervisor/bin/dflash-supervisor serve-server --spec {spec}"
    assert s["ExecStopPost"].endswith(f"serve-server --spec {spec} --record-exit")
    assert s["Restart"] == "no"                      # the daemon restarts, with backoff
    assert s["KillMode"] == "control-group"          # SGLang's schedulers die with it
    # A server unit stopping must not remove the daemon's runtime directory (its socket).
    assert "RuntimeDirectory" not in s
    unit = _section(TEMPLATE, "Unit")
    # Propagated on a daemon crash too (systemd 252): every model would reload (docs/systemd.md).
    for key in ("StopPropagatedFrom", "PartOf", "BindsTo", "Requires"):
        assert key not in unit, key


def test_template_is_hardened_as_the_daemons_unit():
    daemon, server = _service(), _section(TEMPLATE, "Service")
    shared = {k: v for k, v in daemon.items() if k not in _OWN_KEYS}
    assert {k: server.get(k) for k in shared} == shared


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_accepts_the_template(tmp_path):
    # An instance file: verify resolves %i and %S as for dflash-sglang@gpu0.service.
    unit = _unit_for_this_checkout(tmp_path, TEMPLATE, "dflash-sglang@gpu0.service")
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    mine = [line for line in out.stderr.splitlines() if "dflash-sglang@" in line]
    assert not mine, mine


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_template_exposure_no_worse_than_the_daemons(tmp_path):
    unit = _unit_for_this_checkout(tmp_path, TEMPLATE, "dflash-sglang@gpu0.service")
    out = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                          f"--threshold={int(float(MAX_EXPOSURE) * 10)}", unit.name],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    if "Unknown command verb" in out.stderr or "unrecognized option" in out.stderr:
        pytest.skip("this systemd-analyze has no offline security check")
    assert out.returncode == 0, out.stdout[-400:] or out.stderr


def test_polkit_rule_allows_only_the_server_units():
    rule = POLKIT_RULE.read_text()
    assert 'action.id !== "org.freedesktop.systemd1.manage-units"' in rule
    assert 'subject.user !== "dflash"' in rule
    assert r"/^dflash-sglang@[A-Za-z0-9_.-]+\.service$/" in rule
    assert '["start", "stop", "restart", "kill"]' in rule
    # The template's user is the one the rule names.
    assert _section(TEMPLATE, "Service")["User"] == "dflash" == _service()["User"]
