"""The proof a daemon asks before it adopts a server an earlier one left running
(supervisor/servers/adoption.py), put to real processes: a listener started as a server
would be (its own session, the job's token in its environment, its port bound), then
judged against records and configs that hold or break one proof at a time."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from state.records import ServerProcess as ServerRecord
from supervisor.servers.adoption import TOKEN_ENV, Action, head_length, judge
from supervisor.servers.launch_command import ServerSpec
from supervisor.servers.process_launcher import ProcessLauncher
from tests.fixtures.ports import free_base_port

# Binds the port given after --port, says so, and waits to be stopped.
LISTENER = """
import socket, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen()
print("listening", flush=True)
time.sleep(600)
"""
TOKEN = "a" * 32


def _argv(port: int, *flags: str) -> list[str]:
    return [sys.executable, "-c", LISTENER, "--model-path", "m", "--host", "127.0.0.1",
            "--port", str(port), *flags]


class Started:
    def __init__(self, argv: list[str], env: dict[str, str], listen: bool = True) -> None:
        self.argv = argv
        self.popen = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                      start_new_session=True)
        assert self.popen.stdout is not None
        if listen:
            assert self.popen.stdout.readline().strip() == b"listening"
        self.started_at = psutil.Process(self.popen.pid).create_time()

    def record(self, name: str = "gpu0", argv: list[str] | None = None,
               started_at: float | None = None) -> ServerRecord:
        return ServerRecord(name, self.popen.pid, self.popen.pid, argv or self.argv,
                            self.started_at if started_at is None else started_at)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)
        assert self.popen.stdout is not None
        self.popen.stdout.close()


@pytest.fixture
def started() -> Iterator[list[Started]]:
    procs: list[Started] = []
    yield procs
    for p in procs:
        p.stop()


def _env(token: str | None = TOKEN, devices: str = "0") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env["CUDA_VISIBLE_DEVICES"] = devices
    if token is not None:
        env[TOKEN_ENV] = token
    return env


def _spec(port: int, *flags: str) -> ServerSpec:
    return ServerSpec("gpu0", (0,), port, "127.0.0.1", tuple(_argv(port, *flags)))


def test_every_proof_holds_and_it_is_adopted(started: list[Started]) -> None:
    port = free_base_port(1)
    s = Started(_argv(port, "--mem-fraction-static", "0.8"), _env())
    started.append(s)
    v = judge(s.record(), _spec(port, "--mem-fraction-static", "0.8"), "0", TOKEN,
              ProcessLauncher())
    assert v.action is Action.ADOPT, v.why
    assert v.proc is not None and v.proc.pid == s.popen.pid and v.proc.popen is None
    assert not v.proc.exited
    assert f"adopting pid {s.popen.pid}" in v.line(s.record())


def test_other_flags_are_adopted_for_a_rolling_restart(started: list[Started]) -> None:
    port = free_base_port(1)
    s = Started(_argv(port, "--mem-fraction-static", "0.8"), _env())
    started.append(s)
    v = judge(s.record(), _spec(port, "--mem-fraction-static", "0.9"), "0", TOKEN,
              ProcessLauncher())
    assert v.action is Action.ROLL and "rolling restart" in v.why


def test_another_jobs_token_is_never_adopted_nor_touched(started: list[Started]) -> None:
    port = free_base_port(1)
    s = Started(_argv(port), _env(token="b" * 32))
    started.append(s)
    v = judge(s.record(), _spec(port), "0", TOKEN, ProcessLauncher())
    assert v.action is Action.FOREIGN and v.proc is None
    line = v.line(s.record())
    assert f"not adopting pid {s.popen.pid}" in line and "-c" in line
    assert f"its {TOKEN_ENV} is not this job's" in line


def test_a_server_without_any_token_is_a_leftover_to_stop(started: list[Started]) -> None:
    port = free_base_port(1)
    s = Started(_argv(port), _env(token=None))
    started.append(s)
    v = judge(s.record(), _spec(port), "0", TOKEN, ProcessLauncher())
    assert v.action is Action.STOP and f"carries no {TOKEN_ENV}" in v.why


def test_a_record_that_is_not_this_process_is_not_adopted(started: list[Started]) -> None:
    port = free_base_port(1)
    s = Started(_argv(port), _env())
    started.append(s)
    # Another start time: the pid was handed to someone else since it was recorded.
    v = judge(s.record(started_at=s.started_at - 3600), _spec(port), "0", TOKEN,
              ProcessLauncher())
    assert v.action is Action.ORPHAN and v.proc is None
    # The recorded command line is not this one's.
    v = judge(s.record(argv=_argv(port, "--other")), _spec(port), "0", TOKEN,
              ProcessLauncher())
    assert v.action is Action.FOREIGN and "not the one recorded" in v.why


def test_its_port_held_by_another_process_fails_the_proof(started: list[Started]) -> None:
    port, other = free_base_port(2), 0
    other = port + 1
    holder = Started(_argv(other), _env(token=None))
    started.append(holder)
    # Ours listens on `port`, but the config's server is on the port the holder has.
    s = Started(_argv(port), _env())
    started.append(s)
    spec = ServerSpec("gpu0", (0,), other, "127.0.0.1", tuple(_argv(other)))
    v = judge(s.record(), spec, "0", TOKEN, ProcessLauncher())
    assert v.action is Action.STOP and f"port {other} is held by another process" in v.why


def test_other_gpus_or_model_are_not_this_server(started: list[Started]) -> None:
    port = free_base_port(1)
    s = Started(_argv(port), _env(devices="3"))
    started.append(s)
    v = judge(s.record(), _spec(port), "0", TOKEN, ProcessLauncher())
    assert v.action is Action.STOP and "CUDA_VISIBLE_DEVICES=3" in v.why
    spec = ServerSpec("gpu0", (0,), port, "127.0.0.1",
                      tuple(_argv(port)[:4] + ["other-model"] + _argv(port)[5:]))
    v = judge(s.record(), spec, "3", TOKEN, ProcessLauncher())
    assert v.action is Action.STOP and "command, model or port differ" in v.why


def test_a_server_still_loading_is_adopted_to_finish_loading(started: list[Started]) -> None:
    port = free_base_port(1)
    argv = [sys.executable, "-c", "import time; time.sleep(600)", "--model-path", "m",
            "--host", "127.0.0.1", "--port", str(port)]
    s = Started(argv, _env(), listen=False)
    started.append(s)
    spec = ServerSpec("gpu0", (0,), port, "127.0.0.1", tuple(argv))
    v = judge(s.record(), spec, "0", TOKEN, ProcessLauncher())
    assert v.action is Action.ADOPT and "still loading" in v.why, v.why


def test_a_gone_server_is_an_orphan_record(started: list[Started]) -> None:
    port = free_base_port(1)
    s = Started(_argv(port), _env())
    s.stop()
    v = judge(s.record(), _spec(port), "0", TOKEN, ProcessLauncher())
    assert v.action is Action.ORPHAN


def test_head_length_covers_the_server_itself() -> None:
    argv = ["py", "-m", "sglang", "--model-path", "m", "--host", "h", "--port", "1",
            "--tp-size", "2", "--mem", "0.8"]
    assert argv[:head_length(argv)] == argv[:-2]
    assert head_length(argv[:9] + ["--mem", "1"]) == 9
