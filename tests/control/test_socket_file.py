"""The socket file: 0660 with the configured group in a 0750 directory, checked by connecting
as `nobody` with and without that group; a stale socket is replaced, a live one is never
taken; the file goes away with the daemon."""

from __future__ import annotations

import grp
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures import REPO
from tests.fixtures import control_daemon as daemon

pytestmark = pytest.mark.slow

SETPRIV = shutil.which("setpriv")


def _group() -> grp.struct_group:
    """A group `nobody` is not in, for the socket."""
    for name in ("adm", "daemon", "sys", "users"):
        try:
            g = grp.getgrnam(name)
        except KeyError:
            continue
        if "nobody" not in g.gr_mem:
            return g
    pytest.skip("no spare group on this machine")


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory `nobody` may traverse (pytest's tmp dirs are root's own, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="dflash-ctl-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_nobody(*argv: str, groups: int | None = None) -> subprocess.CompletedProcess[str]:
    who = ["--groups", str(groups)] if groups is not None else ["--clear-groups"]
    return subprocess.run([SETPRIV, "--reuid", "nobody", "--regid", "nogroup", *who, *argv],
                          capture_output=True, text=True, timeout=60, cwd="/",
                          env={**os.environ, "HOME": "/", "PYTHONPATH": str(REPO)})


@pytest.mark.skipif(SETPRIV is None or os.geteuid() != 0,
                    reason="needs root and setpriv to connect as another user")
def test_only_the_sockets_group_may_connect(tmp_path: Path, open_dir: Path) -> None:
    group = _group()
    # The client runs as `nobody` with this Python: an interpreter or install under a
    # directory only root may enter (a per-user pyenv in /root) cannot be used that way.
    probe = as_nobody(sys.executable, "-c", "import supervisor.client.control_client")
    if probe.returncode != 0:
        pytest.skip(f"`nobody` cannot run {sys.executable} with this project: "
                    f"{(probe.stderr.strip().splitlines() or ['?'])[-1]}")
    sock = open_dir / "run" / "control.sock"
    d = daemon.start(tmp_path / "job", servers=1,
                     control={"socket": str(sock), "group": group.gr_name})
    try:
        st, dir_st = os.stat(sock), os.stat(sock.parent)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
        assert st.st_gid == group.gr_gid
        assert stat.S_IMODE(dir_st.st_mode) == 0o750 and dir_st.st_gid == group.gr_gid
        ctl = [sys.executable, "-m", "supervisor", "ctl", "--socket", str(sock)]

        refused = as_nobody(*ctl, "pause", "as nobody")
        assert refused.returncode == 69, refused.stderr
        assert "Permission denied" in refused.stderr and "Traceback" not in refused.stderr
        curl = as_nobody("curl", "-sS", "--unix-socket", str(sock), "http://x/v1/status")
        assert curl.returncode != 0 and curl.stdout == ""

        allowed = as_nobody(*ctl, "--json", "pause", "as nobody", groups=group.gr_gid)
        assert allowed.returncode == 0, allowed.stderr
        assert json.loads(allowed.stdout)["reason"] == "as nobody"
        status = as_nobody("curl", "-sS", "--unix-socket", str(sock), "http://x/v1/status",
                           groups=group.gr_gid)
        assert json.loads(status.stdout)["paused"] == [{"source": "operator",
                                                        "reason": "as nobody"}]
        (actor, detail), = d.query("SELECT actor, detail FROM events WHERE "
                                   "kind = 'control_action' AND subject = 'pause'")
        caller = json.loads(detail)["caller"]
        assert caller["uid"] == 65534 and caller["user"] == "nobody" and caller["pid"] > 0
        assert actor.startswith("nobody (uid 65534, pid ")
    finally:
        assert d.stop() == 0, d.log()[-2000:]
    assert not sock.exists()          # removed on the way out


def test_a_stale_socket_is_replaced(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    path = job / "control.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()                      # what a SIGKILLed daemon leaves behind
    os.chmod(path, 0o604)
    d = daemon.start(job, servers=1, ready=False)
    try:
        # (Inode numbers are no proof: the filesystem may hand the same one out again.)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
        with d.client() as client:
            assert client.status().daemon_pid == d.proc.pid
    finally:
        assert d.stop() == 0, d.log()[-2000:]


def test_a_live_socket_stops_the_second_daemon_before_it_touches_anything(
        tmp_path: Path) -> None:
    first = daemon.start(tmp_path / "a", servers=1, ready=False)
    try:
        inode = os.stat(first.socket).st_ino
        data = daemon.config_dict(tmp_path / "b", servers=1,
                                  control={"socket": first.socket})
        second = daemon.spawn(tmp_path / "b", data)
        assert second.wait(timeout=60) == 2
        log = (tmp_path / "b" / "daemon.log").read_text()
        assert f"another daemon (pid {first.proc.pid}) answers on {first.socket}" in log
        assert "Traceback" not in log
        assert not (tmp_path / "b" / "job.db").exists()
        assert os.stat(first.socket).st_ino == inode
        with first.client() as client:
            assert client.status().daemon_pid == first.proc.pid
    finally:
        assert first.stop() == 0, first.log()[-2000:]


def test_a_file_that_is_not_a_socket_is_left_alone(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "control.sock").write_text("precious\n")
    proc = daemon.spawn(job, daemon.config_dict(job, servers=1, prompts=10))
    assert proc.wait(timeout=60) == 2
    assert "exists and is not a socket" in (job / "daemon.log").read_text()
    assert (job / "control.sock").read_text() == "precious\n"


def test_a_socket_path_longer_than_sun_path_works(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    d = daemon.start(deep, servers=1, ready=False)
    try:
        assert len(str(deep / "control.sock")) > 108
        with d.client() as client:
            assert client.status().daemon_pid == d.proc.pid
    finally:
        assert d.stop() == 0, d.log()[-2000:]
