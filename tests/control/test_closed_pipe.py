"""Every command whose reader goes away early (`dflash-supervisor check | head -1`) exits
quietly, with a real child process and a pipe whose reading end is closed before the command
writes; and `status --state DB` names the socket beside that DB when no daemon answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from state.settings_keys import Setting
from state.store import Store
from supervisor.config import parse_config
from supervisor.uploads.wiring import output_location
from tests.fixtures.job_toml import write_job_toml
from tests.fixtures.state_db import rows

REPO = Path(__file__).resolve().parents[2]
EXIT_BROKEN_PIPE = 141       # 128 + SIGPIPE: what a tool killed by SIGPIPE reports


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DFLASH_SOCKET", None)
    return env


def into_closed_pipe(args: list[str], err: Path) -> int:
    """Run `dflash-supervisor ARGS` with stdout a pipe nobody reads any more."""
    with open(err, "wb") as stderr:
        child = subprocess.Popen([sys.executable, "-m", "supervisor", *args],
                                 stdout=subprocess.PIPE, stderr=stderr, env=_env(), cwd="/")
        assert child.stdout is not None
        child.stdout.close()       # the reader is gone before the first byte is written
        return child.wait(timeout=60)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config, and a state DB with prompts, events and an output recorded."""
    d = tmp_path_factory.mktemp("pipe")
    toml = write_job_toml(d, servers=3, prompts=10)
    out = d / "out"
    out.mkdir()
    cfg = parse_config({"job": {"output": str(out)}, "servers": {"count": 1, "model_path": "-"},
                        "generation": {"enable_thinking": False}}, base_dir=d)
    with Store.open(d / "state.db") as store:
        store.import_batch(rows(5))
        store.set_setting(Setting.OUTPUT_LOCATION, output_location(cfg, d / "spool", d / "state.db"))
        for i in range(30):
            store.add_event("control_action", "job", {"i": i}, "test", float(i))
        store.close_for_readers()
    return toml


def _commands(job: Path) -> dict[str, list[str]]:
    db = str(job.parent / "state.db")
    none = str(job.parent / "none.sock")
    return {
        "help": ["--help"],
        "check": ["check", "--config", str(job)],
        "status": ["status", "--state", db, "--socket", none, "--events", "30"],
        "status-json": ["status", "--state", db, "--socket", none, "--json"],
        "status-watch": ["status", "--state", db, "--socket", none, "--watch", "0.1"],
        "ctl-help": ["ctl", "--help"],
        "verify": ["verify", "--state", db],
        "requeue": ["requeue", "--failed", "--state", db],
    }


@pytest.mark.parametrize("name", ["help", "check", "status", "status-json", "status-watch",
                                  "ctl-help", "verify", "requeue"])
def test_a_closed_pipe_ends_the_command_quietly(job, name, tmp_path):
    args = _commands(job)[name]
    err = tmp_path / "stderr"
    code = into_closed_pipe(args, err)
    assert err.read_text() == ""
    # argparse's --help drops a failed write itself and exits 0; the rest say the pipe broke.
    assert code in ((0, EXIT_BROKEN_PIPE) if name.endswith("help") else (EXIT_BROKEN_PIPE,))


def test_an_open_pipe_is_read_to_the_end(job):
    """The same commands, read: the pipe handling changes nothing when the reader stays."""
    r = subprocess.run([sys.executable, "-m", "supervisor", *_commands(job)["check"]],
                       capture_output=True, text=True, env=_env(), cwd="/", timeout=60)
    assert r.returncode == 0 and r.stdout.count("--model-path") == 3, r.stderr


def test_status_names_the_socket_beside_its_db(tmp_path):
    db = tmp_path / "job.db"
    with Store.open(db) as store:
        store.import_batch(rows(2))
    r = subprocess.run([sys.executable, "-m", "supervisor", "status", "--state", str(db)],
                       capture_output=True, text=True, env=_env(), cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"from the state DB (no daemon answers on "
                               f"{tmp_path / 'control.sock'} ("), r.stdout
    js = subprocess.run([sys.executable, "-m", "supervisor", "status", "--state", str(db),
                         "--json"], capture_output=True, text=True, env=_env(), cwd="/",
                        timeout=60)
    assert str(tmp_path / "control.sock") in json.loads(js.stdout)["why"]
