"""Spawning a server in its own process group, and stopping the whole group.

SGLang forks scheduler and detokenizer processes; a stray one keeps its GPU memory and port,
so every signal goes to the group, and "stopped" means no live member is left, not just that
the leader exited. All of this blocks (fork, /proc reads), so async code calls it in threads.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import psutil

from supervisor.servers.server_log import ServerLog

log = logging.getLogger(__name__)


# create_time is derived from boot time and start ticks; allow for rounding, nothing more.
CREATE_TIME_SLACK_S = 1.0


@dataclass
class ServerProcess:
    """A running server: the launcher's handle, whoever started it (launcher.py).

    `popen` is set only when the server is this daemon's own child; a server adopted from an
    earlier daemon (or run by systemd) is watched by pid and create_time, and when it ends
    its exit status is unknown."""

    pid: int
    pgid: int
    argv: tuple[str, ...]
    # psutil's create_time of the leader: recorded in the state DB so a later daemon can tell
    # our orphan from an unrelated process that reused the pid.
    started_at: float
    log_mark: int = 0
    popen: subprocess.Popen[bytes] | None = None
    adopted: bool = False
    # The launcher's own name for it, where it has one (a systemd unit).
    unit: str | None = None
    stopped_by_us: bool = field(default=False)
    # The server it runs ("gpu0"), so a line about its process group names the server.
    name: str = ""

    @property
    def returncode(self) -> int | None:
        """Popen's status for our own child (poll() reaps the leader; until then its pid,
        and so the pgid, cannot be reused); None otherwise, and while it runs."""
        return self.popen.poll() if self.popen is not None else None

    @property
    def exited(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is not None
        return not leader_alive(self.pid, self.started_at)


def leader_alive(pid: int, started_at: float) -> bool:
    """Whether `pid` is still the process that started at `started_at` (not a zombie, not
    a newcomer that reused the number). Blocking: reads /proc."""
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(p.create_time() - started_at) <= CREATE_TIME_SLACK_S
    except psutil.Error:
        return False


def spawn(argv: Sequence[str], env: Mapping[str, str], log_sink: ServerLog, header: str,
          cwd: str | None = None) -> ServerProcess:
    """Start `argv` in a session and process group of its own, its stdout and stderr
    appended to the log file (server_log.py says why not a pipe). Blocking. Raises OSError
    when the command cannot be executed."""
    log_sink.skip_to_end()
    mark = log_sink.line_count
    log_sink.write_header(header)
    out = log_sink.open_for_server()
    try:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,  # its own session and process group: pgid == pid
            close_fds=True,
        )
    finally:
        os.close(out)
    try:
        started_at = psutil.Process(popen.pid).create_time()
    except psutil.Error:
        started_at = time.time()  # it already died; nothing will match it later anyway
    log_sink.follow()
    return ServerProcess(popen.pid, popen.pid, tuple(argv), started_at, mark, popen=popen)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in the group. Blocking: scans /proc."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass  # someone else's group with this id; the scan below decides
    members = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) != pgid:
                continue
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                # A zombie holds nothing; its parent (maybe not us) reaps it when it can.
                continue
        except (ProcessLookupError, psutil.Error, OSError):
            continue
        members.append(pid)
    return members


def signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        # Not ours to signal (another user's group with this id): never escalate.
        log.error("process group %d: not permitted to send signal %d", pgid, sig)
        return False


def stop_group(pgid: int, grace_s: float, leader: ServerProcess | None = None,
               kill_wait_s: float = 10.0, poll_s: float = 0.05, name: str = "") -> str:
    """SIGTERM the group, wait up to grace_s for it to empty, then SIGKILL it. Blocking.

    Returns "gone" (nothing was running), "terminated", "killed" or "stuck" (members survived
    SIGKILL: uninterruptible sleep in the driver; logged, and the caller carries on)."""

    # An operator reads these lines by server: a process group id alone names nothing.
    who = f"{name}: process group {pgid}" if name else f"process group {pgid}"

    def reap() -> None:
        if leader is not None:
            leader.returncode  # noqa: B018 - reaps our own leader so it stops counting

    def empty(result: str) -> str:
        # The scan skips zombies, so the leader may have died between our poll() and the
        # scan: collect its status now (the exit event records it), or its Popen would
        # never learn that it ended. It is dead or a zombie, so this returns at once.
        if leader is not None and leader.popen is not None and leader.popen.returncode is None:
            try:
                leader.popen.wait(timeout=kill_wait_s)
            except subprocess.TimeoutExpired:
                log.error("%s is empty but its leader %d did not exit", who, leader.pid)
        return result

    reap()
    if not group_members(pgid):
        return empty("gone")
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        reap()
        if not group_members(pgid):
            return empty("terminated")
        time.sleep(poll_s)
    survivors = group_members(pgid)
    log.warning("%s did not stop within %g s of SIGTERM; sending SIGKILL to %s",
                who, grace_s, survivors)
    signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + kill_wait_s
    while time.monotonic() < deadline:
        reap()
        if not group_members(pgid):
            return empty("killed")
        time.sleep(poll_s)
    log.error("%s survived SIGKILL: %s", who, group_members(pgid))
    return "stuck"
