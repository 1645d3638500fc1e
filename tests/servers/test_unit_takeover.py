"""A server unit's life started outside the daemon (an operator's `systemctl restart
dflash-sglang@gpu0`) is taken over only with the adoption proof (unit_takeover.py), put to
real processes: taken over when it is this job's as the config wants it, stopped when it is
ours with other flags, left alone when another job's. The unit itself under a real systemd:
tests/systemd/test_servers_outlive_daemon.py."""

from __future__ import annotations

from state.records import ServerProcess as ServerRecord
from supervisor.servers.adoption import Action
from supervisor.servers.process_group import ServerProcess
from supervisor.servers.process_launcher import ProcessLauncher
from supervisor.servers.unit_takeover import take_over
from tests.fixtures.ports import free_base_port
from tests.servers.test_adoption_proof import TOKEN, Started, _argv, _env, _spec, started  # noqa: F401


class UnitsLauncher(ProcessLauncher):
    """The process launcher, with a unit that runs `running` (or nothing) and a log of
    what it was asked to stop."""

    def __init__(self, running: Started | None) -> None:
        self.running = running
        self.stopped: list[int] = []

    def started_outside(self, name: str) -> ServerRecord | None:
        return None if self.running is None else self.running.record(name)

    def stop(self, proc: ServerProcess, grace_s: float, kill_wait_s: float) -> str:
        self.stopped.append(proc.pid)
        return super().stop(proc, grace_s, kill_wait_s)


def _take_over(launcher: object, port: int, *flags: str):
    return take_over("gpu0", _spec(port, *flags), launcher, TOKEN,  # type: ignore[arg-type]
                     {"CUDA_VISIBLE_DEVICES": "0"}, grace_s=2.0, kill_wait_s=2.0)


def test_this_jobs_server_as_configured_is_taken_over(started: list[Started]) -> None:
    port = free_base_port(1)
    s = Started(_argv(port, "--mem-fraction-static", "0.8"), _env())
    started.append(s)
    launcher = UnitsLauncher(s)
    verdict = _take_over(launcher, port, "--mem-fraction-static", "0.8")
    assert verdict is not None and verdict.action is Action.ADOPT, verdict
    assert verdict.proc is not None and verdict.proc.pid == s.popen.pid
    assert launcher.stopped == [] and s.popen.poll() is None


def test_another_jobs_server_is_left_alone(started: list[Started]) -> None:
    port = free_base_port(1)
    s = Started(_argv(port), _env(token="b" * 32))
    started.append(s)
    launcher = UnitsLauncher(s)
    assert _take_over(launcher, port) is None
    assert launcher.stopped == [] and s.popen.poll() is None


def test_ours_with_other_flags_is_stopped_for_a_fresh_start(started: list[Started]) -> None:
    port = free_base_port(1)
    s = Started(_argv(port, "--mem-fraction-static", "0.7"), _env())
    started.append(s)
    launcher = UnitsLauncher(s)
    assert _take_over(launcher, port, "--mem-fraction-static", "0.8") is None
    assert launcher.stopped == [s.popen.pid]
    assert s.popen.wait(10) is not None


def test_on_other_gpus_is_stopped(started: list[Started]) -> None:
    port = free_base_port(1)
    s = Started(_argv(port), _env(devices="1"))
    started.append(s)
    launcher = UnitsLauncher(s)
    assert _take_over(launcher, port) is None and launcher.stopped == [s.popen.pid]


def test_nothing_running_or_no_units_is_nothing_to_take_over(started: list[Started]) -> None:
    port = free_base_port(1)
    assert _take_over(UnitsLauncher(None), port) is None
    s = Started(_argv(port), _env())
    started.append(s)
    # The process launcher has no units: a running process is found by adoption at start only.
    assert _take_over(ProcessLauncher(), port) is None and s.popen.poll() is None
