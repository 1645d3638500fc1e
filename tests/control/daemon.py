"""A real daemon for the control tests: `python -m supervisor run` as a child process on
simulated SGLang servers, its control socket on disk, its state DB readable beside it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.client.control_client import ControlClient, ControlUnreachable
from supervisor.contract.status import Status
from tests.fixtures.job_toml import job_data, write_toml
from tests.fixtures.state_db import read_db

# Slow enough that the job never finishes during a test (about 1 s a request, 16 slots,
# 20,000 prompts), fast enough to start in a fraction of a second.
SIM_FLAGS: dict[str, Any] = {"max-running-requests": 8, "sim-tokens-per-s": 50,
                             "sim-time-scale": 5.0, "sim-startup-s": 1.0,
                             "context-length": 4096}


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    directory: Path
    socket: str
    log_path: Path

    @property
    def db(self) -> Path:
        return self.directory / "job.db"

    def client(self, **kwargs: Any) -> ControlClient:
        return ControlClient(self.socket, **kwargs)

    def query(self, sql: str, *args: object) -> list[tuple]:
        return read_db(self.db, sql, *args)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_status(self, condition: Any, what: str, timeout_s: float = 30.0) -> Status:
        deadline = time.monotonic() + timeout_s
        with self.client() as client:
            while True:
                s = client.status()
                if condition(s):
                    return s
                if time.monotonic() > deadline:
                    raise AssertionError(f"timed out waiting for {what}; last status "
                                         f"{[(x.name, x.state.value) for x in s.servers]}")
                time.sleep(0.05)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        return self.proc.returncode


def config_dict(directory: Path, *, servers: int = 2, prompts: int = 20_000,
                control: dict[str, Any] | None = None, **servers_overrides: Any) -> dict[str, Any]:
    data = job_data(directory, servers=servers, prompts=prompts, job={"shard_size": 100},
                    **servers_overrides)
    data["generation"]["max_tokens"] = 256
    data["quality"] = {"metrics_window_s": 5.0}
    data["control"] = {**data["control"], "interval_s": 0.25, **(control or {})}
    data["servers"]["flags"] = dict(SIM_FLAGS)
    return data


def spawn(directory: Path, data: dict[str, Any]) -> subprocess.Popen[bytes]:
    write_toml(directory / "job.toml", data)
    log = open(directory / "daemon.log", "ab")
    try:
        return subprocess.Popen([sys.executable, "-m", "supervisor", "run", "--config",
                                 str(directory / "job.toml")], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=directory)
    finally:
        log.close()


def start(directory: Path, *, ready: bool = True, **kwargs: Any) -> Daemon:
    data = config_dict(directory, **kwargs)
    socket = data["control"].get("socket") or str(directory / "control.sock")
    proc = spawn(directory, data)
    d = Daemon(proc, directory, socket, directory / "daemon.log")
    try:
        _wait_answering(d)
        if ready:
            d.wait_status(lambda s: all(x.state.value == "READY" for x in s.servers),
                          "every server READY")
    except BaseException:
        d.stop()          # a daemon that never became usable is not left running
        raise
    return d


def _wait_answering(d: Daemon) -> None:
    deadline = time.monotonic() + 60
    with d.client(timeout_s=2.0) as client:
        while True:
            if d.proc.poll() is not None:
                raise AssertionError(f"daemon exited {d.proc.returncode}: {d.log()[-2000:]}")
            try:
                client.status()
                return
            except ControlUnreachable:
                if time.monotonic() > deadline:
                    raise AssertionError(f"no control socket after 60 s: {d.log()[-2000:]}")
                time.sleep(0.05)
