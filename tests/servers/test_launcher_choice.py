"""`servers.launcher` picks who runs the servers (supervisor/servers/launcher_choice.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from supervisor.config import ConfigError, JobConfig, ServersSection
from supervisor.config.checks import validate
from supervisor.servers import launcher_choice
from supervisor.servers.launcher import under_systemd
from supervisor.servers.launcher_choice import choose_launcher
from supervisor.servers.process_launcher import ProcessLauncher
from supervisor.servers.systemd_launcher import SystemdLauncher


def test_process_and_auto_outside_systemd_are_the_process_launcher() -> None:
    assert isinstance(choose_launcher("process", {}), ProcessLauncher)
    assert isinstance(choose_launcher("auto", {}), ProcessLauncher)
    assert not under_systemd({}) and under_systemd({"INVOCATION_ID": "abc"})


def test_auto_under_systemd_without_the_template_is_the_process_launcher(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher_choice, "template_installed", lambda: False)
    assert isinstance(choose_launcher("auto", {"INVOCATION_ID": "abc"}), ProcessLauncher)


@pytest.mark.skipif(shutil.which("systemctl") is None, reason="no systemctl on this machine")
def test_systemd_is_taken_when_named_or_when_auto_runs_under_systemd(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher_choice, "template_installed", lambda: True)
    assert isinstance(choose_launcher("systemd", {}), SystemdLauncher)
    assert isinstance(choose_launcher("auto", {"INVOCATION_ID": "x"}), SystemdLauncher)
    assert isinstance(choose_launcher("auto", {}), ProcessLauncher)


def test_a_launcher_that_cannot_work_here_is_one_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher_choice, "template_installed", lambda: False)
    with pytest.raises(ValueError, match=r'^servers.launcher = "systemd": '):
        choose_launcher("systemd", {})
    with pytest.raises(ValueError, match=r"^servers.launcher = 'docker': must be "):
        choose_launcher("docker", {})


def test_an_unknown_launcher_is_refused_at_load() -> None:
    cfg = JobConfig(servers=ServersSection(count=1, model_path="m", launcher="docker"))
    with pytest.raises(ConfigError, match='servers.launcher: must be "auto", "process" or '
                                          '"systemd", got \'docker\''):
        validate(cfg)


def test_run_stops_with_one_line_when_the_launcher_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job refuses to start, naming the key, before any server is launched."""
    import anyio

    from supervisor.job.main_loop import Job
    from supervisor.job.store_setup import JobError
    from tests.fixtures.real_job import job_config, query

    monkeypatch.setattr(launcher_choice, "template_installed", lambda: False)
    cfg = job_config(tmp_path, servers=1, prompts=5, launcher="systemd")
    with pytest.raises(JobError, match='^servers.launcher = "systemd": '):
        anyio.run(Job(cfg, handle_signals=False).run)
    assert query(cfg, "SELECT count(*) FROM server_processes") == [(0,)]
