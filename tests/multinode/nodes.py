"""Several "nodes" of one job on this machine: each a real `dflash-supervisor run` process with
its own work directory (state, spool, logs), all on simulated servers, one shared output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.fixtures.state_db import read_db


@dataclass
class Node:
    index: int
    config: Path
    workdir: Path
    proc: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.workdir.parent / f"{self.workdir.name}.log"

    def start(self, env: dict[str, str]) -> Node:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "supervisor", "run", "--config", str(self.config),
                 "--workdir", str(self.workdir)], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        return self

    def wait(self, timeout_s: float = 120.0) -> int:
        """The node's exit status; a node still running after `timeout_s` fails the test with
        the end of its log, which says where it stood."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"node {self.index} still running after {timeout_s:.0f} s; its log "
                        f"ends:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def query(self, sql: str) -> list[tuple]:
        return read_db(self.workdir / "job.db", sql)

    def kill_hard(self) -> None:
        """The node is lost: the daemon and every server it started die at once."""
        groups = [pgid for (pgid,) in self.query("select pgid from server_processes")]
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # A server started in the instant before its group reached the DB is not in the
        # table; left alive it would hold the port a replacement node is configured with.
        for pid in self._servers_on_our_ports():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _servers_on_our_ports(self) -> list[int]:
        servers = tomllib.loads(self.config.read_text())["servers"]
        ports = {str(servers["base_port"] + i) for i in range(servers.get("count", 1))}
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            args = [a.decode(errors="replace") for a in argv]
            if "supervisor.sim" in args and any(
                    a == "--port" and i + 1 < len(args) and args[i + 1] in ports
                    for i, a in enumerate(args)):
                found.append(int(proc.name))
        return found

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill_hard()


def slurm_env(base: dict[str, str], index: int, count: int) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("SLURM_")}
    env.update({"SLURM_JOB_ID": str(500 + index), "SLURM_ARRAY_JOB_ID": "500",
                "SLURM_ARRAY_TASK_ID": str(index), "SLURM_ARRAY_TASK_COUNT": str(count),
                "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": str(count - 1)})
    return env


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:         # the DB or the object not there yet
            pass
        time.sleep(0.1)
    pytest.fail(f"not within {timeout_s} s: {what}")
