"""`dflash-supervisor status` and `ctl` as a script uses them: real processes, exit codes,
live figures from the socket or the DB's when no daemon answers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.contract import status as c
from supervisor.contract.actions import RequeueResult
from tests.fixtures import control_daemon as daemon

pytestmark = pytest.mark.slow


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "supervisor", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[daemon.Daemon]:
    running = daemon.start(tmp_path_factory.mktemp("cli") / "job")
    yield running
    running.stop()


def test_status_live_text_and_json(d: daemon.Daemon) -> None:
    text = cli("status", "--state", str(d.db))
    assert text.returncode == 0, text.stderr
    assert f"live from the daemon (pid {d.proc.pid}) on {d.socket}" in text.stdout
    assert "gpu0" in text.stdout and "READY" in text.stdout
    js = cli("status", "--socket", d.socket, "--json")
    s = c.Status.from_json(js.stdout)
    assert s.daemon_pid == d.proc.pid and len(s.servers) == 2


def _as_from_a_shell() -> None:
    """A child as a shell starts it: Ctrl-C neither ignored nor blocked, whatever this test
    worker's own threads do with SIGINT meanwhile (a child that inherited either never saw
    the test's SIGINT, once in CI)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_status_watch_refreshes_until_interrupted(d: daemon.Daemon) -> None:
    with subprocess.Popen([sys.executable, "-m", "supervisor", "status", "--socket", d.socket,
                           "--json", "--watch", "0.2"], stdout=subprocess.PIPE, text=True,
                          preexec_fn=_as_from_a_shell) as proc:
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline() for _ in range(3)]
        finally:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0
    times = [c.Status.from_json(line).time for line in lines]
    assert times == sorted(times) and times[0] < times[-1]


@pytest.mark.parametrize("args", [["status"], ["status", "--watch", "0.1"],
                                  ["ctl", "log", "gpu0", "-n", "50"]],
                         ids=["status", "status-watch", "ctl-log"])
def test_live_commands_into_a_closed_pipe_end_quietly(d: daemon.Daemon, args: list[str],
                                                      tmp_path: Path) -> None:
    """`dflash-supervisor status | head -1` and the like, against a live daemon."""
    from tests.control.test_closed_pipe import EXIT_BROKEN_PIPE
    err = tmp_path / "stderr"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "supervisor", args[0], "--socket",
                                 d.socket, *args[1:]], stdout=subprocess.PIPE, stderr=stderr)
        assert proc.stdout is not None
        proc.stdout.close()
        assert proc.wait(timeout=30) == EXIT_BROKEN_PIPE
    assert err.read_text() == ""


@pytest.mark.parametrize("args,code,out", [
    (["max-tokens", "300"], 0, "max tokens 256 -> 300"),
    (["max-tokens", "5000"], 1, "refused (422): max_tokens 5000 is not below"),
    (["max-tokens", "many"], 2, "invalid int value"),
    (["reset", "gpu0"], 1, "refused (409): gpu0 is READY, not FAILED"),
    (["restart", "gpu7"], 1, "refused (404): no server named 'gpu7'"),
    (["retune", "mem-fraction-static"], 2, "expected FLAG=VALUE"),
    (["retune", "nonsense-flag=1"], 1, "unknown flag 'nonsense-flag'"),
    (["log", "gpu1", "-n", "2"], 0, ""),
    (["requeue-failed"], None, ""),
])
def test_ctl_answers_and_exit_codes(d: daemon.Daemon, args: list[str], code: int | None,
                                    out: str) -> None:
    r = cli("ctl", "--socket", d.socket, *args)
    if code is None:                 # depends on what this version offers
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr
        return
    assert r.returncode == code, (r.stdout, r.stderr)
    assert out in r.stdout + r.stderr and "Traceback" not in r.stderr
    if args[0] == "log":
        assert 1 <= len(r.stdout.splitlines()) <= 2


def test_ctl_pause_then_resume(d: daemon.Daemon) -> None:
    """One test, not two cases: the resume needs this pause, and xdist may run two cases of
    one parametrized test on different workers (each with its own module daemon)."""
    r = cli("ctl", "--socket", d.socket, "pause", "two", "words")
    assert r.returncode == 0 and "paused: two words" in r.stdout, (r.stdout, r.stderr)
    r = cli("ctl", "--socket", d.socket, "resume")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "resumed (operator: two words)" in r.stdout and "Traceback" not in r.stderr


def test_ctl_json_is_the_contracts_record(d: daemon.Daemon) -> None:
    r = cli("ctl", "--socket", d.socket, "--json", "requeue-truncated")
    assert r.returncode == 0, r.stderr
    result = RequeueResult.from_json(r.stdout)
    assert result.what == "truncated" and result.count >= 0


def test_unreachable_is_its_own_exit_code(tmp_path: Path) -> None:
    r = cli("ctl", "--socket", str(tmp_path / "none.sock"), "resume")
    assert r.returncode == 69 and "no daemon answers on" in r.stderr
    assert "Traceback" not in r.stderr
    r = cli("status", "--socket", str(tmp_path / "none.sock"))
    assert r.returncode == 69


def test_status_falls_back_to_the_db_and_says_so(tmp_path: Path) -> None:
    d = daemon.start(tmp_path / "job", servers=1, ready=False)
    d.wait_status(lambda s: s.job.done > 0, "a first result")
    assert d.stop() == 0
    text = cli("status", "--state", str(d.db))
    assert text.returncode == 0, text.stderr
    # The daemon took its socket with it: the one beside the DB is named, not /run's.
    assert text.stdout.startswith(f"from the state DB (no daemon answers on "
                                  f"{d.db.parent / 'control.sock'} ")
    assert "(No such file or directory)): live rates need the daemon" in text.stdout
    assert "prompts  20000:" in text.stdout
    js = json.loads(cli("status", "--state", str(d.db), "--json").stdout)
    assert js["source"] == "state-db" and js["job"]["total"] == 20_000
    assert js["job"]["done"] > 0
