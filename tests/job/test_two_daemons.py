"""One daemon per job: a second `run` on the same state DB — even with another config — exits
2 naming the first daemon's pid, and touches nothing of it: the first daemon's servers keep
serving and its job finishes with every prompt exactly once."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from state.job_lock import holder_pid
from tests.fixtures import REPO
from tests.fixtures.fs_faults import cli
from tests.fixtures.job_toml import write_job_toml
from tests.fixtures.state_db import read_db

pytestmark = pytest.mark.slow


def _ready(state: Path) -> int:
    try:
        return read_db(state, "SELECT count(*) FROM events WHERE kind = 'server_state' "
                              "AND json_extract(detail, '$.to') = 'READY'")[0][0]
    except sqlite3.OperationalError:      # the daemon has the lock but not its tables yet
        return 0


def test_a_second_daemon_is_refused_and_the_first_finishes(tmp_path: Path):
    # 250 prompts at half a second each on 16 slots: about 8 s of work once both servers
    # are READY, time enough for the second daemon to start and be refused.
    first_toml = write_job_toml(tmp_path / "first", servers=2, prompts=250,
                                flags={"sim-time-scale": 10.0})
    state = tmp_path / "first" / "job.db"
    # Another config file for the same job: other servers, other ports, same state DB.
    second_toml = write_job_toml(tmp_path / "second", servers=1, prompts=10,
                                 job={"state": str(state)})
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen([sys.executable, "-m", "supervisor", "run", "--config",
                              str(first_toml)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if holder_pid(state) == first.pid and _ready(state) == 2:
                break
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-2000:]
            time.sleep(0.1)
        else:
            pytest.fail("the first daemon never got both servers READY")
        second = cli(["run", "--config", str(second_toml)], timeout=60)
        assert second.returncode == 2
        lines = [l for l in second.stderr.splitlines() if "another daemon" in l]
        assert lines and f"another daemon (pid {first.pid}) runs this job" in lines[0]
        assert "Traceback" not in second.stderr
        assert first.wait(timeout=120) == 0, (tmp_path / "first.log").read_text()[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
        log.close()
    stops = read_db(state, "SELECT count(*) FROM events WHERE kind = 'server_state' AND "
                           "json_extract(detail, '$.to') = 'STOPPING' AND "
                           "json_extract(detail, '$.reason') != 'supervisor shutting down'")
    assert stops == [(0,)]                 # nobody stopped the first daemon's servers early
    ids = [json.loads(line)["id"] for p in sorted((tmp_path / "first" / "shards").glob("*.jsonl"))
           for line in p.read_text().splitlines()]
    assert len(ids) == 250 and len(set(ids)) == 250
