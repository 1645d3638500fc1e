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
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import psutil

from supervisor.servers.unit_spec import (UnitSpec, exit_path, read_exit, spec_path,
                                          write_spec)

log = logging.getLogger(__name__)

TEMPLATE = "dflash-sglang@.service"
DEFAULT_STATE_DIR = Path("/var/lib/dflash-supervisor")
SYSTEMCTL_TIMEOUT_S = 60.0
# create_time is derived from boot time and start ticks; allow for rounding, nothing more.
_CREATE_TIME_SLACK_S = 1.0


class LaunchError(OSError):
    """A unit that could not be started or stopped: one line naming the unit and systemd's
    own reason (polkit's refusal, a missing template)."""


def unit_name(server: str) -> str:
    return f"dflash-sglang@{server}.service"


def systemctl(*args: str, timeout_s: float = SYSTEMCTL_TIMEOUT_S,
              check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        out = subprocess.run(["systemctl", "--no-pager", "--no-ask-password", *args],
                             capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"systemctl {' '.join(args)}: {exc}") from None
    if check and out.returncode != 0:
        why = (out.stderr.strip() or out.stdout.strip()).splitlines()
        hint = ""
        if any("authentication required" in line.lower() or "access denied" in line.lower()
               for line in why):
            hint = (" (is systemd/50-dflash-supervisor.rules installed in "
                    "/etc/polkit-1/rules.d, and polkitd running?)")
        raise LaunchError(f"systemctl {' '.join(args)}: {why[0] if why else 'failed'}{hint}")
    return out


def show(unit: str, *props: str) -> dict[str, str]:
    out = systemctl("show", unit, *(f"--property={p}" for p in props))
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def template_installed() -> bool:
    """Whether systemd knows the server template (an instance of it loads)."""
    if shutil.which("systemctl") is None:
        return False
    try:
        return show(unit_name("probe"), "LoadState").get("LoadState") == "loaded"
    except LaunchError:
        return False


def under_systemd(env: Mapping[str, str]) -> bool:
    # systemd sets INVOCATION_ID for every service it runs (and nothing else sets it).
    return bool(env.get("INVOCATION_ID"))


def state_dir(env: Mapping[str, str]) -> Path:
    """The daemon unit's StateDirectory (the template reads its specs from there)."""
    value = env.get("STATE_DIRECTORY", "")
    return Path(value.split(":")[0]) if value else DEFAULT_STATE_DIR


@dataclass
class UnitServer:
    """One server running in its unit: what the daemon records and watches."""

    name: str
    unit: str
    pid: int
    argv: tuple[str, ...]
    started_at: float            # the main process's create time (psutil)
    invocation: str              # the unit's InvocationID: which start this life is
    exit_file: Path              # where the unit's ExecStopPost records how it ended
    log_mark: int = 0
    stopped_by_us: bool = field(default=False)
    result: str | None = None    # systemd's Result once it ended (success, oom-kill ...)
    _returncode: int | None = field(default=None, repr=False)

    @property
    def pgid(self) -> int:
        return self.pid          # systemd makes every service's main process a session leader

    def alive(self) -> bool:
        try:
            p = psutil.Process(self.pid)
            return (abs(p.create_time() - self.started_at) <= _CREATE_TIME_SLACK_S
                    and p.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    @property
    def exited(self) -> bool:
        return self.result is not None or not self.alive()

    @property
    def returncode(self) -> int | None:
        """None while it runs, and until the unit's ExecStopPost has recorded how it ended;
        then the exit code, or minus the signal, as Popen says it."""
        if self.result is None and not self.alive():
            record = read_exit(self.exit_file)
            if record is not None and record.invocation == self.invocation:
                self.result, self._returncode = record.result, record.returncode
        return self._returncode


class SystemdLauncher:
    """Starts each server as `dflash-sglang@NAME.service`; stops it through systemd."""

    kind = "systemd"

    def __init__(self, spec_dir: Path, poll_s: float = 0.1) -> None:
        self.spec_dir = spec_dir
        self.poll_s = poll_s

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SystemdLauncher:
        return cls(state_dir(env) / "servers")

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str],
              log_path: str | os.PathLike[str], cwd: str | None = None) -> UnitServer:
        """Writes the spec and starts the unit; returns once the server is exec'd (Type=exec).
        Raises LaunchError (an OSError) when systemd refuses or the command cannot run."""
        unit = unit_name(name)
        state = show(unit, "ActiveState")["ActiveState"]
        if state in ("active", "activating", "reloading", "deactivating"):
            # Not ours to reuse without proof (adoption decides that): a fresh life only.
            raise LaunchError(f"{unit} is already {state}; not starting a second server")
        write_spec(self.spec_dir, UnitSpec(name, tuple(argv), dict(env), os.fspath(log_path),
                                           cwd))
        systemctl("start", unit)
        s = show(unit, "MainPID", "ActiveState", "Result", "InvocationID")
        pid = int(s.get("MainPID", "0") or 0)
        if pid == 0:
            raise LaunchError(f"{unit}: not running after start (state {s.get('ActiveState')}, "
                              f"result {s.get('Result')}; see its log or journalctl -u {unit})")
        try:
            started_at = psutil.Process(pid).create_time()
        except psutil.Error:
            started_at = time.time()  # it already died; returncode says how
        log.info("%s: started %s (pid %d)", name, unit, pid)
        return UnitServer(name, unit, pid, tuple(argv), started_at, s.get("InvocationID", ""),
                          self._exit_file(name))

    def _exit_file(self, name: str) -> Path:
        return exit_path(spec_path(self.spec_dir, name))

    def find(self, name: str) -> UnitServer | None:
        """The server unit's running main process, if any (for adoption, which proves it is
        this job's before using it)."""
        unit = unit_name(name)
        s = show(unit, "MainPID", "ActiveState", "InvocationID")
        pid = int(s.get("MainPID", "0") or 0)
        if s.get("ActiveState") != "active" or pid == 0:
            return None
        try:
            p = psutil.Process(pid)
            return UnitServer(name, unit, pid, tuple(p.cmdline()), p.create_time(),
                              s.get("InvocationID", ""), self._exit_file(name))
        except psutil.Error:
            return None

    def stop(self, server: UnitServer, grace_s: float, kill_wait_s: float = 10.0) -> str:
        """SIGTERM to the unit's whole cgroup, SIGKILL after grace_s. Returns "gone",
        "terminated", "killed" or "stuck", as process_group.stop_group does."""
        unit = server.unit
        if self._inactive(unit):
            return "gone"
        server.stopped_by_us = True
        # --no-block: the grace is ours (servers.stop_grace_s), not the unit's TimeoutStopSec.
        systemctl("stop", "--no-block", unit)
        if self._wait_inactive(unit, grace_s):
            server.returncode  # noqa: B018 - records how it ended while systemd still has it
            return "terminated"
        log.warning("%s did not stop within %g s; sending SIGKILL to its cgroup", unit, grace_s)
        systemctl("kill", "--signal=SIGKILL", unit, check=False)
        if self._wait_inactive(unit, kill_wait_s):
            server.returncode  # noqa: B018
            return "killed"
        log.error("%s survived SIGKILL (state %s)", unit, show(unit, "ActiveState"))
        return "stuck"

    def _inactive(self, unit: str) -> bool:
        return show(unit, "ActiveState")["ActiveState"] in ("inactive", "failed")

    def _wait_inactive(self, unit: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            if self._inactive(unit):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_s)
