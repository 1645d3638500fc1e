"""An attach-only daemon (`python -m supervisor run`, count = 0) on a simulated server the
test started: the status over the socket shows it READY with its URL, `status` says it is
attached, an operator's restart, retune or reset of it is refused with one clear message
(and nothing restarts), and the daemon's stop leaves it running."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.client.control_client import ControlRefused
from supervisor.sim.launch import kill_group, sim_argv, wait_healthy
from tests.fixtures import control_daemon as daemon
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    port = free_port()
    flags = [f"--{k}" if v is True else f"--{k}={v}" for k, v in daemon.SIM_FLAGS.items()]
    proc = subprocess.Popen(sim_argv(port, *flags, "--enable-metrics"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    proc.port = port  # type: ignore[attr-defined]
    wait_healthy(f"http://127.0.0.1:{port}", proc)
    yield proc
    kill_group(proc)


def test_an_attach_only_daemon_refuses_to_restart_its_server_and_leaves_it_running(
        tmp_path: Path, sim: subprocess.Popen[bytes]) -> None:
    url = f"http://127.0.0.1:{sim.port}"  # type: ignore[attr-defined]
    d = daemon.start(tmp_path / "job", servers=0, attach=[url])
    try:
        status = d.wait_status(lambda s: s.servers and s.servers[0].state.value == "READY",
                               "ext0 READY")
        [ext] = status.servers
        assert (ext.name, ext.attached_url, ext.pid, ext.gpus) == ("ext0", url, None, ())
        d.wait_status(lambda s: s.job.done > 0, "answers from ext0")
        with d.client() as client:
            for act in (lambda: client.restart("ext0"), lambda: client.reset("ext0"),
                        lambda: client.retune({"max-running-requests": 4}, server="ext0")):
                with pytest.raises(ControlRefused) as exc:
                    act()
                assert exc.value.status == 409
                assert exc.value.reason.startswith(f"ext0 is attached ({url}): the daemon did "
                                                   "not launch it and never ")
            with pytest.raises(ControlRefused, match="runs no server of its own"):
                client.retune({"max-running-requests": 4})
            assert client.restart().order == ()
        text = subprocess.run([sys.executable, "-m", "supervisor", "status", "--socket",
                               d.socket], capture_output=True, text=True, timeout=60)
        assert f"attached {url} (not launched, restarted or stopped by the daemon)" in \
            text.stdout, text.stdout + text.stderr
    finally:
        assert d.stop() == 0, d.log()[-3000:]
    assert sim.poll() is None, "the daemon's stop ended the attached server"
    states = [r[0] for r in d.query("SELECT json_extract(detail, '$.to') FROM events "
                                    "WHERE kind = 'server_state' AND subject = 'ext0' "
                                    "ORDER BY id")]
    assert states == ["STARTING", "READY", "STOPPED"]
    assert "launched pid" not in d.log()
