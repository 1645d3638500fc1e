"""`servers.launcher` picks who runs the servers (supervisor/servers/launcher.py)."""

from __future__ import annotations

import pytest
from pathlib import Path

from supervisor.config import ConfigError, JobConfig, ServersSection
from supervisor.config.checks import validate
from supervisor.servers import launcher
from supervisor.servers.launcher import choose_launcher, under_systemd
from supervisor.servers.process_launcher import ProcessLauncher


def test_process_and_auto_outside_systemd_are_the_process_launcher() -> None:
    assert isinstance(choose_launcher("process", {}), ProcessLauncher)
    assert isinstance(choose_launcher("auto", {}), ProcessLauncher)
    assert not under_systemd({}) and under_systemd({"INVOCATION_ID": "abc"})


def test_auto_under_systemd_without_the_template_is_the_process_launcher(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "template_installed", lambda: False)
    assert isinstance(choose_launcher("auto", {"INVOCATION_ID": "abc"}), ProcessLauncher)


def test_a_registered_launcher_is_taken_when_named(monkeypatch: pytest.MonkeyPatch) -> None:
    class Other:
        kind = "systemd"

    monkeypatch.setitem(launcher.FACTORIES, "systemd", Other)
    monkeypatch.setattr(launcher, "template_installed", lambda: True)
    assert isinstance(choose_launcher("systemd", {}), Other)
    assert isinstance(choose_launcher("auto", {"INVOCATION_ID": "x"}), Other)
    assert isinstance(choose_launcher("auto", {}), ProcessLauncher)


def test_a_launcher_this_build_lacks_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "_factory", lambda kind: None)
    with pytest.raises(ValueError, match=r"servers.launcher = 'systemd': no systemd launcher"):
        choose_launcher("systemd", {})


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

    monkeypatch.setattr(launcher, "_factory", lambda kind: None)
    cfg = job_config(tmp_path, servers=1, prompts=5, launcher="systemd")
    with pytest.raises(JobError, match="^servers.launcher = 'systemd': no systemd launcher"):
        anyio.run(Job(cfg, handle_signals=False).run)
    assert query(cfg, "SELECT count(*) FROM server_processes") == [(0,)]
