"""The unit under a real systemd, installed as docs/install.md says, driven
through one job's life with `systemctl`: start → READY and STATUS=; reload with a new max
tokens → applied and audited; reload with a bad config → refused, the job goes on; SIGKILL
→ systemd restarts the daemon and it resumes; stop mid-run → requests in flight finish in the
grace, no server left; start again → the job finishes: every prompt exactly once, unit
inactive, exit status 0, the hardened unit in force the whole time.

One test for the whole sequence (a box boot costs seconds); simulated SGLang servers and
small timings keep it to about a minute.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from supervisor.demo.prompts import write_demo_prompts
from tests.fixtures.systemd_box import REPO, Box, why_not_runnable

UNIT = "dflash-supervisor"
STATE = "/var/lib/dflash-supervisor"
PROMPTS = 900
HARDENING = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
             "ProtectKernelTunables": "yes", "PrivateDevices": "no", "DevicePolicy": "auto",
             "RestrictAddressFamilies": "AF_INET AF_INET6 AF_NETLINK AF_UNIX",
             "LimitNOFILE": "65536"}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def job_toml(base_port: int, max_tokens: int, extra: str = "") -> str:
    return f"""
[job]
prompts = "{STATE}/prompts.jsonl"
state = "{STATE}/job.db"
output = "{STATE}/output"
shard_size = 100
model = "sim"
[generation]
max_tokens = {max_tokens}
enable_thinking = false
[servers]
count = 2
base_port = {base_port}
command = ["{sys.executable}", "-m", "supervisor.sim"]
model_path = "sim/model"
log_dir = "/var/log/dflash-supervisor"
startup_timeout_s = 60
health_interval_s = 1
stop_grace_s = 5
[servers.flags]
max-running-requests = 8
context-length = 4096
sim-tokens-per-s = 50
sim-time-scale = 4
sim-startup-s = 4
[dispatch]
stop_grace_s = 30
[uploads]
min_free_bytes = 0
{extra}"""


def install(box: Box, base_port: int) -> None:
    """docs/install.md, step by step; the venv step is this checkout's venv put at
    /opt/dflash-supervisor (the box has no package index to pip install from)."""
    box.sh("mkdir", "-p", "/etc/sysusers.d", "/opt")
    box.write("/etc/sysusers.d/dflash-supervisor.conf",
              (REPO / "systemd/dflash-supervisor.sysusers").read_text())
    box.sh("systemd-sysusers")
    box.sh("ln", "-s", sys.prefix, "/opt/dflash-supervisor")
    box.write("/etc/systemd/system/dflash-supervisor.service",
              (REPO / "systemd/dflash-supervisor.service").read_text())
    box.sh("install", "-d", "-m", "0755", "/etc/dflash-supervisor")
    box.write("/etc/dflash-supervisor/job.toml", job_toml(base_port, 256), 0o640)
    box.sh("chgrp", "dflash", "/etc/dflash-supervisor/job.toml")
    box.sh("install", "-d", "-o", "dflash", "-g", "dflash", "-m", "0750", STATE)
    write_demo_prompts(box.root / STATE.lstrip("/") / "prompts.jsonl", PROMPTS)
    box.sh("chown", "dflash:dflash", f"{STATE}/prompts.jsonl")
    box.sh("env", f"PYTHONPATH={REPO}", "/opt/dflash-supervisor/bin/dflash-supervisor", "check",
           "--config",
           "/etc/dflash-supervisor/job.toml")
    dropin = "[Service]\n# Small timings for the test.\nRestartSec=1\n" + code_dropin()
    box.write("/etc/systemd/system/dflash-supervisor.service.d/test.conf", dropin)
    box.sh("systemctl", "daemon-reload")


def code_dropin() -> str:
    """What a unit needs to run this checkout's code from this venv."""
    # The venv's editable install may point at another checkout (a git worktree's venv is
    # the main one's): this checkout's code comes first on the path.
    dropin = f"Environment=PYTHONPATH={REPO}\n"
    prefix = Path(sys.base_prefix)
    if prefix.is_relative_to("/root") or prefix.is_relative_to("/home"):
        # docs/systemd.md: a Python under a home directory needs this drop-in (ProtectHome hides it).
        dropin += f"ProtectHome=tmpfs\nBindReadOnlyPaths={prefix}\n"
    for path in sorted({REPO, Path(sys.prefix).resolve()}):
        if path.is_relative_to("/tmp") or path.is_relative_to("/var/tmp"):
            # A checkout (or its venv) under /tmp, as a CI clone may be: PrivateTmp= gives the
            # service an empty /tmp, so the code is bound in from the host's.
            dropin += f"BindReadOnlyPaths={path}\n"
    return dropin


@pytest.fixture
def box(tmp_path: Path):
    why = why_not_runnable()
    if why:
        pytest.skip(why)
    b = Box(tmp_path / "box")
    venv = Path(sys.prefix).resolve()
    try:
        b.up(REPO, *([] if venv.is_relative_to(REPO) else [venv]))
        yield b
    finally:
        b.down()


def test_the_unit_lives_through_a_job_under_systemd(box: Box) -> None:
    install(box, free_port_block())

    def q(sql: str, *args: object) -> list[tuple]:
        # Inside the box, with its sqlite3, read-only: the way an operator there would.
        for arg in args:
            sql = sql.replace("?", "'" + str(arg).replace("'", "''") + "'", 1)
        out = box.sh("sqlite3", "-json", f"file:{STATE}/job.db?mode=ro", sql).stdout
        return [tuple(row.values()) for row in json.loads(out or "[]")]

    def done() -> int:
        return q("SELECT n FROM status_counts WHERE status = 'done'")[0][0]

    def events(kind: str) -> list[dict]:
        return [json.loads(d) | {"actor": a} for d, a in
                q("SELECT detail, actor FROM events WHERE kind = ? ORDER BY id", kind)]

    def hardened(pid: str) -> None:
        assert box.show(UNIT, *HARDENING) == HARDENING
        status = box.sh("cat", f"/proc/{pid}/status").stdout
        assert "NoNewPrivs:\t1" in status and "CapBnd:\t0000000000000000" in status, status

    # start → READY (systemctl start returns only then) and a STATUS= line.
    box.sh("systemctl", "start", UNIT)
    s = box.show(UNIT, "ActiveState", "StatusText", "MainPID")
    assert s["ActiveState"] == "active"
    box.wait(lambda: "servers 2/2 ready" in box.show(UNIT, "StatusText")["StatusText"],
             "STATUS= to say both servers are ready")
    first_pid = s["MainPID"]
    hardened(first_pid)
    box.wait(lambda: done() >= 30, "30 prompts done")

    # reload with a changed max tokens → applied, audited, READY again.
    config = box.root / "etc/dflash-supervisor/job.toml"
    config.write_text(job_toml(base_port_of(config), 200))
    box.sh("systemctl", "reload", UNIT)
    box.wait(lambda: len(events("config_reload")) == 1, "the reload's audit event")
    reload = events("config_reload")[0]
    assert reload["result"] == "applied" and reload["actor"] == "systemd", reload
    assert reload["changes"] == {"generation.max_tokens": [256, 200]}, reload
    assert events("max_tokens")[-1]["to"] == 200
    box.wait(lambda: q("SELECT count(*) FROM prompts WHERE max_tokens = 200")[0][0] > 0,
             "results generated under the reloaded max tokens")
    assert box.show(UNIT, "ActiveState")["ActiveState"] == "active"

    # reload with a bad config → refused whole, the job goes on in the same process.
    good = config.read_text()
    config.write_text(good + "\n[quality]\nmax_bad_rat = 0.4\n")
    before = done()
    box.sh("systemctl", "reload", UNIT)
    box.wait(lambda: len(events("config_reload")) == 2, "the refused reload's audit event")
    refused = events("config_reload")[1]
    assert refused["result"] == "refused", refused
    assert "quality.max_bad_rat: unknown key" in refused["error"], refused
    assert "reload refused" in box.journal(UNIT)
    box.wait(lambda: done() > before + 20, "the job to go on after a refused reload")
    assert box.show(UNIT, "MainPID", "ActiveState") == {"MainPID": first_pid,
                                                        "ActiveState": "active"}
    config.write_text(good)

    # SIGKILL the daemon → systemd restarts it, it resumes exactly.
    box.sh("kill", "-KILL", first_pid)
    box.wait(lambda: box.show(UNIT, "NRestarts", "ActiveState") ==
             {"NRestarts": "1", "ActiveState": "active"}, "systemd to restart the daemon")
    second_pid = box.show(UNIT, "MainPID")["MainPID"]
    assert second_pid != first_pid
    hardened(second_pid)
    box.wait(lambda: len(events("job_started")) == 2, "the second daemon's start")
    before = done()
    box.wait(lambda: done() > before + 30, "progress after the restart")

    # stop mid-run → requests in flight finish within the grace, the rest is requeued,
    # no server process is left.
    box.sh("systemctl", "stop", UNIT, timeout=240)
    assert box.show(UNIT, "ActiveState")["ActiveState"] == "inactive"
    stopped = events("job_stopped")[-1]
    assert stopped["reason"] == "stopped by SIGTERM", stopped
    assert stopped["finished_in_grace"] > 0 and stopped["requeued"] == 0, stopped
    assert stopped["pending"] > 0, "the job finished before the stop: the test proves nothing"
    assert q("SELECT count(*) FROM prompts WHERE status = 'in_flight'") == [(0,)]
    assert box.pids_of("dflash") == []
    assert "finished in the grace" in box.journal(UNIT)

    # start again → the job finishes; the unit ends inactive with exit status 0.
    box.sh("systemctl", "start", UNIT)
    box.wait(lambda: box.show(UNIT, "ActiveState")["ActiveState"] == "inactive",
             "the job to finish", timeout_s=300)
    end = box.show(UNIT, "Result", "ExecMainStatus", "NRestarts")
    assert end == {"Result": "success", "ExecMainStatus": "0", "NRestarts": "0"}, end
    assert q("SELECT status, n FROM status_counts WHERE n > 0") == [("done", PROMPTS)]
    ids = []
    for shard in sorted((box.root / STATE.lstrip("/") / "output").rglob("*.jsonl")):
        ids += [json.loads(line)["id"] for line in shard.read_text().splitlines()]
    assert sorted(ids) == sorted(f"demo-{i:06d}" for i in range(PROMPTS))
    assert box.pids_of("dflash") == []
    # The unit systemd ran is the repository's, unmodified, plus the test's drop-in.
    frag = box.show(UNIT, "FragmentPath", "DropInPaths")
    assert (box.root / frag["FragmentPath"].lstrip("/")).read_text() == \
        (REPO / "systemd/dflash-supervisor.service").read_text()
    assert frag["DropInPaths"].endswith("dflash-supervisor.service.d/test.conf")


def free_port_block() -> int:
    from tests.fixtures.ports import free_base_port
    return free_base_port(2)


def base_port_of(config: Path) -> int:
    for line in config.read_text().splitlines():
        if line.startswith("base_port"):
            return int(line.split("=")[1])
    raise AssertionError("no base_port in the config")
