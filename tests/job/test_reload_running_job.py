"""Reloading the config of a real running job (the SIGHUP path, called directly): live keys
change at once and are audited, a changed server flag rolls through the servers, and a
restart-only key or a bad file is refused whole while the job goes on."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import pytest

from supervisor.client.control_client import ControlClient, ControlRefused
from supervisor.config import load_config
from supervisor.contract.tuning import TuneStartRequest
from supervisor.job.main_loop import Job
from tests.fixtures.job_toml import job_data, write_toml
from tests.fixtures.real_job import (
    assert_every_prompt_once,
    completed_on,
    query,
    run_job,
    transitions,
    wait_fleet,
    wait_for,
)

pytestmark = pytest.mark.slow
SLOW = {"sim-time-scale": 10.0}     # about half a second a request


def reload_events(cfg) -> list[tuple[dict, str]]:
    return [(json.loads(d), a) for d, a in query(
        cfg, "SELECT detail, actor FROM events WHERE kind = 'config_reload' ORDER BY id")]


def restart_over_the_socket(directory: Path) -> None:
    with ControlClient(str(directory / "control.sock")) as client:
        client.restart()


def setup(tmp_path: Path, **kw) -> tuple[Path, dict]:
    data = job_data(tmp_path, **kw)
    return write_toml(tmp_path / "job.toml", data), data


async def attach(job: Job, path: Path, done: int = 20) -> None:
    job.reload_config = lambda: load_config(path)
    await wait_fleet(job)
    await wait_for(lambda: completed_on(job, "gpu0") >= done, f"{done} completions")


async def test_live_keys_change_at_once_and_are_audited(tmp_path: Path):
    path, data = setup(tmp_path, servers=2, prompts=300, flags=SLOW)
    cfg = await anyio.to_thread.run_sync(load_config, path)
    lines: list[str] = []

    async def reload(job: Job) -> None:
        await attach(job, path)
        data["generation"]["max_tokens"] = 200
        data["dispatch"] = {"max_attempts": 5, "stop_grace_s": 30}
        data["quality"] = {"max_bad_rate": 0.4}
        write_toml(path, data)
        lines.append(await job.reload("systemd"))
        assert job.dispatcher is not None
        assert job.dispatcher.max_tokens == 200
        assert job.dispatcher.config.dispatch.max_attempts == 5
        assert job.dispatcher.quality.max_bad_rate == 0.4
        assert job.config.dispatch.stop_grace_s == 30
        assert job.last_status is not None
        await wait_for(lambda: job.last_status.last_reload == lines[0], "the status to say it")

    _, result = await run_job(cfg, reload, timeout_s=120)
    assert_every_prompt_once(cfg, result, 300)
    assert lines[0].startswith("reload applied: generation.max_tokens 256 -> 200, "), lines
    [(event, actor)] = reload_events(cfg)
    assert actor == "systemd" and event["result"] == "applied", event
    assert event["changes"] == {"generation.max_tokens": [256, 200],
                                "dispatch.max_attempts": [3, 5],
                                "dispatch.stop_grace_s": [120.0, 30.0],
                                "quality.max_bad_rate": [0.5, 0.4]}
    assert event["rolling_restart"] is False
    # Like the operator's action: its own event, and the results made after it say 200.
    assert [(a, json.loads(d)) for a, d in query(
        cfg, "SELECT actor, detail FROM events WHERE kind = 'max_tokens'")] == [
        ("systemd", {"from": 256, "to": 200})]
    assert query(cfg, "SELECT count(*) FROM prompts WHERE max_tokens = 200")[0][0] > 0
    # No server was restarted for it.
    assert [t.to for t in transitions(cfg, "gpu0")].count("STARTING") == 1


async def test_a_changed_server_flag_rolls_through_the_servers(tmp_path: Path):
    path, data = setup(tmp_path, servers=2, prompts=300, flags=SLOW)
    cfg = await anyio.to_thread.run_sync(load_config, path)
    seen: dict[str, int] = {}

    async def retune(job: Job) -> None:
        await attach(job, path)
        data["servers"]["flags"]["max-running-requests"] = 4
        write_toml(path, data)
        line = await job.reload("systemd")
        assert line.endswith("(rolling restart of the servers)"), line
        assert job.fleet is not None
        # One roll at a time, whoever asks: the socket refuses a restart while the reload's
        # roll runs (it used to answer 202 and queue it behind), and a second reload that
        # would roll is refused whole.
        assert job.fleet.rolling == "the config reload's rolling restart"
        with pytest.raises(ControlRefused) as refused:
            await anyio.to_thread.run_sync(restart_over_the_socket, path.parent)
        assert refused.value.status == 409 and "reload's rolling restart" in str(refused.value)
        data["servers"]["flags"]["max-running-requests"] = 5
        write_toml(path, data)
        again = await job.reload("systemd")
        assert again.startswith("reload refused: the config reload's rolling restart is still "
                                "running"), again
        assert again.endswith("nothing applied")
        data["servers"]["flags"]["max-running-requests"] = 4
        write_toml(path, data)
        for name, server in job.fleet.servers.items():
            await wait_for(lambda s=server: s.ready.max_running == 4 and str(s.state) == "READY",
                           f"{name} back with the new flag", timeout_s=60)
            async with httpx.AsyncClient(trust_env=False) as client:
                info = (await client.get(f"http://127.0.0.1:{server.port}/server_info")).json()
            seen[name] = info["max_running_requests"]

    _, result = await run_job(cfg, retune, timeout_s=120)
    assert seen == {"gpu0": 4, "gpu1": 4}
    assert_every_prompt_once(cfg, result, 300)
    [(event, _), (refused, _)] = reload_events(cfg)
    assert event["changes"] == {"servers.flags.max-running-requests": [8, 4]}
    assert event["rolling_restart"] is True
    assert refused["result"] == "refused"
    assert query(cfg, "SELECT subject, actor FROM events WHERE kind = 'server_retune'") == [
        ("*", "systemd")]


async def test_restart_only_keys_and_bad_files_are_refused_whole(tmp_path: Path):
    path, data = setup(tmp_path, servers=1, prompts=200, flags=SLOW)
    cfg = await anyio.to_thread.run_sync(load_config, path)
    lines: list[str] = []

    async def refuse(job: Job) -> None:
        await attach(job, path)
        good = path.read_text()
        data["job"]["output"] = "elsewhere"
        data["generation"]["max_tokens"] = 100
        write_toml(path, data)
        lines.append(await job.reload("systemd"))
        path.write_text(good + "\n[dispatch]\nmax_atempts = 3\n")
        lines.append(await job.reload("systemd"))
        path.write_text("[servers\n")
        lines.append(await job.reload("systemd"))
        assert job.dispatcher is not None and job.dispatcher.max_tokens == 256
        assert job.config.job.output == "shards"
        before = completed_on(job, "gpu0")
        await wait_for(lambda: completed_on(job, "gpu0") > before + 10, "the job to go on")

    _, result = await run_job(cfg, refuse, timeout_s=120)
    assert_every_prompt_once(cfg, result, 200)
    assert lines[0] == ("reload refused: job.output: only changes with a restart (systemctl "
                        "restart dflash-supervisor); nothing applied")
    assert lines[1].startswith("reload refused: invalid config: dispatch.max_atempts: "
                               "unknown key")
    assert "not valid TOML" in lines[2]
    assert [e["result"] for e, _ in reload_events(cfg)] == ["refused"] * 3
    assert query(cfg, "SELECT count(*) FROM events WHERE kind = 'max_tokens'") == [(0,)]


async def test_tune_enabled_starts_and_stops_the_search_on_a_reload(tmp_path: Path):
    """`[tune] enabled` is live: turned on, the reload starts the search as a job started
    with it would (here the job is too short to be worth it, which the search says); turned
    off, it stops the search that runs (here one an operator forced), said as stopped by the
    reload's actor. Before, the key refused the whole reload until a restart."""
    path, data = setup(tmp_path, servers=2, prompts=600, flags=SLOW)
    cfg = await anyio.to_thread.run_sync(load_config, path)
    lines: list[str] = []
    seen: dict[str, object] = {}

    async def reload(job: Job) -> None:
        await attach(job, path)
        tuner = job.tuner
        assert tuner is not None and job.task_group is not None
        assert str(tuner.state) == "off"
        data["tune"] = {"enabled": True}
        write_toml(path, data)
        lines.append(await job.reload("systemd"))
        assert tuner.started_by == "config", (tuner.state, tuner.reason)
        # A job this short is not worth a trial, which the search says and ends on.
        await wait_for(lambda: not tuner.running, "the search's verdict", timeout_s=60)
        seen["on"] = (str(tuner.state), tuner.reason)
        # Forced by the operator (as `ctl tune start --force`), then turned off in the file.
        await tuner.start(TuneStartRequest(force=True), "operator", job.task_group)
        assert tuner.running
        data["tune"] = {"enabled": False}
        write_toml(path, data)
        lines.append(await job.reload("systemd"))
        await wait_for(lambda: not tuner.running, "the search to stop")
        seen["off"] = (str(tuner.state), tuner.reason)

    _, result = await run_job(cfg, reload, timeout_s=180)
    assert_every_prompt_once(cfg, result, 600)
    assert lines == ["reload applied: tune.enabled False -> True",
                     "reload applied: tune.enabled True -> False"], lines
    assert seen["on"][0] == "not-worth-it" and "not tuning" in str(seen["on"][1]), seen
    assert seen["off"] == ("off", "stopped by systemd"), seen     # the reload's actor
