"""Servers as systemd units (`dflash-sglang@NAME.service`), so they outlive the daemon.

Under systemd a child process lives in the daemon's cgroup and dies with it (KillMode=mixed
SIGKILLs what is left after a stop or a crash). A unit of its own keeps the model loaded while
the daemon restarts. The daemon's user starts, stops and kills only these units, through
`systemctl` over D-Bus, which polkit allows (systemd/50-dflash-supervisor.rules); the argv and
environment reach the unit through a spec file (unit_spec.py) and `serve-server` execs them,
so the unit's MainPID is the server itself.

What it reads from systemd: MainPID (the server's pid, a session and process group leader:
systemd calls setsid for every service) and InvocationID (which start a life is). How a server
ended comes from the file its unit's ExecStopPost writes (unit_spec.py: systemd unloads a unit
that ended cleanly at once, ExecMainStatus with it), as a Popen returncode: the exit code,
or minus the signal. Liveness is read from /proc (pid and create time), cheap enough for the
exit watcher's poll; systemctl is asked only at start and stop. Every call here blocks: async code
calls it in a worker thread.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from state.records import ServerProcess as ServerRecord
from supervisor.servers.launcher import LaunchRequest
from supervisor.servers.process_group import ServerProcess, leader_alive
from supervisor.servers.systemctl import LaunchError, show, systemctl
from supervisor.servers.unit_spec import UnitSpec, exit_path, read_exit, spec_path, write_spec

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path("/var/lib/dflash-supervisor")
# How long a launch waits for the unit's previous stop to finish.
STOPPING_WAIT_S = 30.0
# How long a unit seen down is watched for a new life before it counts as gone: a restart
# job (an operator's `systemctl restart`) passes through "inactive" on its way to the start.
RESTART_GAP_S = 1.0
# How long a new life may take to exec the server from `serve-server` (its command line is
# the shim's until then, and the adoption proof reads the server's).
EXEC_WAIT_S = 10.0


def unit_name(server: str) -> str:
    return f"dflash-sglang@{server}.service"


def state_dir(env: Mapping[str, str]) -> Path:
    """The daemon unit's StateDirectory (the template reads its specs from there)."""
    value = env.get("STATE_DIRECTORY", "")
    return Path(value.split(":")[0]) if value else DEFAULT_STATE_DIR


@dataclass
class UnitProcess(ServerProcess):
    """A server running as its unit's main process (not the daemon's child)."""

    invocation: str = ""             # the unit's InvocationID: which start this life is
    exit_file: Path | None = None    # where the unit's ExecStopPost records how it ended
    result: str | None = None        # systemd's Result once it ended (success, oom-kill ...)
    _exit_code: int | None = field(default=None, repr=False)

    @property
    def exited(self) -> bool:
        return self.result is not None or not leader_alive(self.pid, self.started_at)

    @property
    def returncode(self) -> int | None:
        """None while it runs, and until the unit's ExecStopPost has recorded how it ended;
        then the exit code, or minus the signal, as Popen says it."""
        if self.result is None and self.exit_file is not None and not leader_alive(
                self.pid, self.started_at):
            record = read_exit(self.exit_file)
            if record is not None and record.invocation == self.invocation:
                self.result, self._exit_code = record.result, record.returncode
        return self._exit_code


class SystemdLauncher:
    """Starts each server as `dflash-sglang@NAME.service`; stops it through systemd
    (launcher.py says what a launcher does)."""

    kind = "systemd"

    def __init__(self, spec_dir: Path, poll_s: float = 0.2) -> None:
        self.spec_dir = spec_dir
        self.poll_s = poll_s

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SystemdLauncher:
        return cls(state_dir(env) / "servers")

    def launch(self, request: LaunchRequest) -> ServerProcess:
        """Writes the spec and starts the unit; returns once the server is exec'd (Type=exec).
        Raises LaunchError (an OSError) when systemd refuses or the command cannot run."""
        unit = unit_name(request.name)
        state = show(unit, "ActiveState")["ActiveState"]
        if state == "deactivating":
            # A stop still finishing (its ExecStopPost, or a server stopped by signal a
            # moment ago): a fresh start waits for it rather than failing a life.
            self._wait_inactive(unit, STOPPING_WAIT_S)
            state = show(unit, "ActiveState")["ActiveState"]
        if state in ("active", "activating", "reloading", "deactivating"):
            # Not ours to reuse without proof (adoption decides that): a fresh life only.
            raise LaunchError(f"{unit} is already {state}; not starting a second server")
        log_sink = request.log
        log_sink.skip_to_end()
        mark = log_sink.line_count
        log_sink.write_header(f"{request.header} ({unit})")
        write_spec(self.spec_dir, UnitSpec(request.name, tuple(request.argv), dict(request.env),
                                           os.fspath(log_sink.path), request.cwd))
        systemctl("start", unit)
        s = show(unit, "MainPID", "ActiveState", "Result", "InvocationID")
        pid = int(s.get("MainPID", "0") or 0)
        log_sink.follow()
        if pid == 0:
            raise LaunchError(f"{unit}: not running after start (state {s.get('ActiveState')}, "
                              f"result {s.get('Result')}; see its log or journalctl -u {unit})")
        try:
            started_at = psutil.Process(pid).create_time()
        except psutil.Error:
            started_at = time.time()  # it already died; returncode says how
        return UnitProcess(pid, pid, tuple(request.argv), started_at, mark, unit=unit,
                           invocation=s.get("InvocationID", ""),
                           exit_file=self._exit_file(request.name))

    def _exit_file(self, name: str) -> Path:
        return exit_path(spec_path(self.spec_dir, name))

    def find(self, record: ServerRecord) -> ServerProcess | None:
        """The recorded server, if it is still its unit's running main process (the pid and
        its create time both match); adoption then asks for the rest of the proof."""
        unit = unit_name(record.name)
        s = show(unit, "MainPID", "ActiveState", "InvocationID")
        if s.get("ActiveState") != "active" or int(s.get("MainPID", "0") or 0) != record.pid:
            return None
        if not leader_alive(record.pid, record.started_at):
            return None
        return UnitProcess(record.pid, record.pid, tuple(record.argv), record.started_at,
                           adopted=True, unit=unit, invocation=s.get("InvocationID", ""),
                           exit_file=self._exit_file(record.name))

    def started_outside(self, name: str) -> ServerRecord | None:
        """The server's unit when it runs a life this daemon did not start (an operator's
        `systemctl restart dflash-sglang@NAME`, which reruns the spec this daemon wrote), as a
        record adoption.judge can take; None when the unit is not running."""
        s = show(unit_name(name), "MainPID", "ActiveState")
        pid = int(s.get("MainPID", "0") or 0)
        if s.get("ActiveState") not in ("active", "activating") or pid == 0:
            return None
        deadline = time.monotonic() + EXEC_WAIT_S
        try:
            p = psutil.Process(pid)
            while True:
                cmdline = p.cmdline()
                if cmdline and "serve-server" not in cmdline:
                    return ServerRecord(name, pid, pid, cmdline, p.create_time())
                if time.monotonic() >= deadline:
                    return None      # still the shim: the next start looks again
                time.sleep(self.poll_s)
        except psutil.Error:
            return None

    def stop(self, proc: ServerProcess, grace_s: float, kill_wait_s: float = 10.0) -> str:
        """SIGTERM to the unit's whole cgroup, SIGKILL after grace_s. Returns "gone",
        "terminated", "killed" or "stuck", as process_group.stop_group does, or "replaced"
        when the unit already runs another life (restarted outside the daemon): that one is
        not this handle's to stop."""
        unit = proc.unit or unit_name("?")
        if proc.exited:
            # It ended without us: its unit is finishing that stop, or is already running
            # a new life (an operator's restart). A stop sent now would cancel that restart.
            settled = self._settle(unit, proc, kill_wait_s)
            if settled is not None:
                return settled
        elif self._inactive(unit):
            return "gone"
        proc.stopped_by_us = True
        # --no-block: the grace is ours (servers.stop_grace_s), not the unit's TimeoutStopSec.
        systemctl("stop", "--no-block", unit)
        if self._wait_inactive(unit, grace_s):
            return "terminated"
        log.warning("%s did not stop within %g s; sending SIGKILL to its cgroup", unit, grace_s)
        systemctl("kill", "--signal=SIGKILL", unit, check=False)
        if self._wait_inactive(unit, kill_wait_s):
            return "killed"
        log.error("%s survived SIGKILL (state %s)", unit, show(unit, "ActiveState"))
        return "stuck"

    def _settle(self, unit: str, proc: ServerProcess, timeout_s: float) -> str | None:
        """"replaced" once the unit runs another invocation, "gone" once it has been down for
        RESTART_GAP_S with none; None if it is still deactivating after timeout_s."""
        ours = proc.invocation if isinstance(proc, UnitProcess) else ""
        deadline = time.monotonic() + timeout_s
        down_since: float | None = None
        while True:
            s = show(unit, "ActiveState", "InvocationID")
            if ours and s.get("InvocationID") not in ("", ours):
                return "replaced"
            if s.get("ActiveState") in ("inactive", "failed"):
                down_since = down_since or time.monotonic()
                if time.monotonic() - down_since >= RESTART_GAP_S:
                    return "gone"
            else:
                down_since = None
            if time.monotonic() >= deadline and down_since is None:
                return None
            time.sleep(self.poll_s)

    def _inactive(self, unit: str) -> bool:
        # Inactive comes after ExecStopPost: the exit record is written by then.
        return show(unit, "ActiveState")["ActiveState"] in ("inactive", "failed")

    def _wait_inactive(self, unit: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            if self._inactive(unit):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_s)

