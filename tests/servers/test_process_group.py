"""Real processes: a leader that forks children which ignore SIGTERM, like a stuck scheduler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from supervisor.servers.orphans import judge, stop_orphan
from supervisor.servers.process_group import group_members, spawn, stop_group
from supervisor.servers.server_log import ServerLog
from tests.fixtures.waiting import wait_until

# Prints its children's pids, then waits; the children ignore SIGTERM when asked to. They
# inherit the ignoring from before the fork, so it holds from their first instant: set in
# the child, a SIGTERM sent right after the "children" line could beat it.
FAMILY = r"""
import os, signal, sys, time
ignore = sys.argv[1] == "ignore"
if ignore:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    pids.append(pid)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
print("children", *pids, flush=True)
time.sleep(600)
"""


def _wait_for_line(log: ServerLog, prefix: str) -> str:
    def line() -> str | None:
        return next((x for x in log.tail(20) if x.startswith(prefix)), None)
    return wait_until(line, f"a {prefix!r} line in the log", 20.0, poll_s=0.02,
                      seen=lambda: "\n".join(log.tail(20)))


def test_stop_group_kills_children_that_ignore_sigterm(tmp_path: Path) -> None:
    log = ServerLog(tmp_path / "fam.log")
    proc = spawn([sys.executable, "-c", FAMILY, "ignore"], dict(os.environ), log, "family")
    assert proc.pgid == proc.pid == os.getpgid(proc.pid)
    children = [int(p) for p in _wait_for_line(log, "children").split()[1:]]
    assert set(children) | {proc.pid} <= set(group_members(proc.pgid))
    assert stop_group(proc.pgid, grace_s=0.3, leader=proc, kill_wait_s=10) == "killed"
    assert group_members(proc.pgid) == []
    assert proc.returncode == -signal.SIGTERM
    log.catch_up(final=True)
    log.close()


def test_stop_group_polite_and_already_gone(tmp_path: Path) -> None:
    log = ServerLog(tmp_path / "fam.log")
    proc = spawn([sys.executable, "-c", FAMILY, "obey"], dict(os.environ), log, "family")
    _wait_for_line(log, "children")
    assert stop_group(proc.pgid, grace_s=10, leader=proc) == "terminated"
    assert stop_group(proc.pgid, grace_s=10, leader=proc) == "gone"
    log.close()


def test_a_killed_leader_is_reaped_before_stop_group_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A hung server ignores SIGTERM. After the SIGKILL its leader can turn into a zombie
    # between our poll() and the /proc scan, which rightly skips zombies; the stop must
    # still collect its exit status (the exit event records the signal) rather than leave
    # a Popen that never saw its child end.
    from supervisor.servers import process_group

    log = ServerLog(tmp_path / "stubborn.log")
    code = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ready', flush=True)\ntime.sleep(600)\n")
    proc = spawn([sys.executable, "-c", code], dict(os.environ), log, "stubborn")
    _wait_for_line(log, "ready")
    real_members, real_signal = process_group.group_members, process_group.signal_group
    killed = []

    def signal_group(pgid: int, sig: int) -> bool:
        killed.append(sig == signal.SIGKILL)
        return real_signal(pgid, sig)

    def members(pgid: int) -> list[int]:
        if killed and killed[-1] and proc.popen.returncode is None:
            # Force the losing order: the leader has died (not yet reaped) before the scan.
            killed.append(False)
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        return real_members(pgid)

    monkeypatch.setattr(process_group, "signal_group", signal_group)
    monkeypatch.setattr(process_group, "group_members", members)
    assert stop_group(proc.pgid, grace_s=0.1, leader=proc, kill_wait_s=10) == "killed"
    assert proc.popen.returncode == -signal.SIGKILL
    log.close()


class Record:
    def __init__(self, name: str, pid: int, argv: list[str], started_at: float) -> None:
        self.name, self.pid, self.pgid, self.argv, self.started_at = name, pid, pid, argv, started_at


def test_orphan_from_a_recorded_pgid_is_stopped(tmp_path: Path) -> None:
    # A "previous daemon" left this server running; all we have is the DB record.
    argv = [sys.executable, "-c", FAMILY, "ignore"]
    orphan = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert orphan.stdout is not None
        orphan.stdout.readline()  # its children exist now
        rec = Record("gpu0", orphan.pid, argv, psutil.Process(orphan.pid).create_time())
        verdict, result = stop_orphan(rec, grace_s=0.3)
        assert orphan.pid in verdict.pids and len(verdict.pids) == 3
        assert result == "killed"
        orphan.wait(10)
        assert group_members(orphan.pid) == []
    finally:
        if orphan.poll() is None:
            os.killpg(orphan.pid, signal.SIGKILL)
            orphan.wait()
        orphan.stdout.close()  # type: ignore[union-attr]


def test_reused_pid_is_left_alone(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(600)"]
    other = subprocess.Popen(argv, start_new_session=True)
    try:
        # Until its exec the child still shows our own command line.
        deadline = time.monotonic() + 10
        while psutil.Process(other.pid).cmdline() != argv and time.monotonic() < deadline:
            time.sleep(0.01)
        ct = psutil.Process(other.pid).create_time()
        # Same pid, but the record says it started an hour earlier: a different program.
        assert judge("gpu0", other.pid, other.pid, argv, ct - 3600).pids == ()
        # Same start time but another command line: also not ours.
        assert judge("gpu0", other.pid, other.pid, ["python", "-m", "x"], ct).pids == ()
        assert judge("gpu0", other.pid, other.pid, argv, ct).pids == (other.pid,)
    finally:
        other.kill()
        other.wait()
    assert judge("gpu0", other.pid, other.pid, argv, 0).why == "no process left"


def test_children_outliving_their_leader_are_found(tmp_path: Path) -> None:
    script = r"""
import os, sys, time
pid = os.fork()
if pid == 0:
    time.sleep(600); os._exit(0)
print(pid, flush=True)
"""
    argv = [sys.executable, "-c", script]
    started = time.time() - 1
    leader = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE)
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    leader.wait(10)
    leader.stdout.close()
    try:
        verdict = judge("gpu1", leader.pid, leader.pid, argv, started)
        assert verdict.pids == (child,) and "outlived" in verdict.why
        assert stop_group(leader.pid, grace_s=5) == "terminated"
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_group_that_outlives_sigterm_is_named_by_its_server(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The SIGKILL warning names the server the launcher started, not a bare group id."""
    from supervisor.servers.launcher import LaunchRequest
    from supervisor.servers.process_launcher import ProcessLauncher

    log = ServerLog(tmp_path / "gpu3.log")
    launcher = ProcessLauncher()
    proc = launcher.launch(LaunchRequest("gpu3", (sys.executable, "-c", FAMILY, "ignore"),
                                         dict(os.environ), log, "gpu3 start #1"))
    _wait_for_line(log, "children")
    with caplog.at_level("WARNING", logger="supervisor.servers"):
        assert launcher.stop(proc, 0.3, 10.0) == "killed"
    said = [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()]
    assert said and said[0].startswith(f"gpu3: process group {proc.pgid} did not stop within"), said
    log.catch_up(final=True)
    log.close()
