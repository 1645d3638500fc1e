"""The daemon as systemd runs it (`python -m supervisor run --config PATH`, a child process
here): after SIGTERM no process is left in any server's process group — not the servers'
own children, and not a hung server that ignores SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.fixtures.real_job import alive, free_base_port, live_group_members, query, transitions
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.slow

CONFIG = """\
[job]
prompts = "prompts.jsonl"
state = "job.db"
output = "shards"
shard_size = 50
model = "sim"

[generation]
max_tokens = 256
enable_thinking = false

[servers]
count = 2
base_port = {base_port}
model_path = "sim/test-model"
command = {command}
startup_timeout_s = 30.0
health_interval_s = 1.0
health_timeout_s = 2.0
health_failures = 3
hang_timeout_s = 30.0
stop_grace_s = 2.0
backoff_initial_s = 0.1

[dispatch]
# No grace: this test is about the servers' process groups at the stop, and a hung server
# would otherwise be noticed and restarted by its health watcher during the grace.
stop_grace_s = 0

[servers.flags]
max-running-requests = 8
sim-children = 2
sim-tokens-per-s = 50
sim-time-scale = 51.2
sim-startup-s = 10.0
"""


def _wait(condition: Callable[[], object], what: str, timeout_s: float = 30.0) -> None:
    # Any error is "not yet": the DB may not exist yet, a server may be loading.
    wait_until(condition, what, timeout_s, tolerate=(Exception,))


def test_sigterm_leaves_no_process_in_any_server_group(tmp_path: Path) -> None:
    from supervisor.config import load_config
    from supervisor.demo.prompts import write_demo_prompts

    write_demo_prompts(tmp_path / "prompts.jsonl", 5000)   # far more than it will finish
    base_port = free_base_port(2)
    command = json.dumps([sys.executable, "-m", "supervisor.sim"])
    config_path = tmp_path / "job.toml"
    config_path.write_text(CONFIG.format(base_port=base_port, command=command))
    cfg = load_config(config_path)
    log_path = tmp_path / "daemon.log"
    with open(log_path, "wb") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "supervisor", "run", "--config",
                                   str(config_path)], stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait(lambda: sorted(n for n, *_ in query(cfg, "SELECT name FROM server_processes"))
              == ["gpu0", "gpu1"] and sum(t.to == "READY" for t in transitions(cfg)) == 2,
              "both servers READY")
        pgids = {n: g for n, g in query(cfg, "SELECT name, pgid FROM server_processes")}
        with httpx.Client(trust_env=False) as client:
            children = [pid for i in range(2) for pid in client.get(
                f"http://127.0.0.1:{base_port + i}/sim/state", timeout=5).json()["children"]]
            _wait(lambda: query(cfg, "SELECT count(*) FROM prompts WHERE status = 'done'")[0][0]
                  >= 20, "some prompts done")
            # gpu1 hangs: its loop is blocked and SIGTERM goes unanswered, so the daemon has
            # to escalate to SIGKILL on its way out.
            client.post(f"http://127.0.0.1:{base_port + 1}/sim/fault", json={"fault": "hang"},
                        timeout=5).raise_for_status()
        time.sleep(0.3)
        assert len(children) == 4 and all(alive(p) for p in children)
        for pgid in pgids.values():
            assert len(live_group_members(pgid)) == 3      # the server and its two children
        daemon.send_signal(signal.SIGTERM)
        rc = daemon.wait(timeout=30)
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
    out = log_path.read_text(errors="replace")
    assert rc == 0, out[-3000:]
    assert "stopped by SIGTERM" in out
    left = {n: live_group_members(g) for n, g in pgids.items()}
    assert left == {"gpu0": [], "gpu1": []}, left
    assert [p for p in children if alive(p)] == []
    assert query(cfg, "SELECT * FROM server_processes") == []
    for name in ("gpu0", "gpu1"):
        last = transitions(cfg, name)[-2:]
        assert [t.to for t in last] == ["STOPPING", "STOPPED"]
        assert last[0].reason == "supervisor shutting down"
        assert last[1].detail["exit_kind"] == "stopped"
        assert f"{name}: STOPPING -> STOPPED: stopped: supervisor shutting down" in out
    groups = {t.subject: t.detail["group"] for t in transitions(cfg) if t.to == "STOPPED"}
    assert groups == {"gpu0": "terminated", "gpu1": "killed"}
    # What it had not finished is pending again, for the next start.
    assert query(cfg, "SELECT count(*) FROM prompts WHERE status = 'in_flight'") == [(0,)]
