"""A reload is checked against what is live, not only against the file it replaces: an
operator's max tokens and the servers' context length bound each other whichever changes
(SGLang answers 400 to every request whose prompt plus max_tokens reaches the context
length, a permanent failure per prompt)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from supervisor.config import load_config
from supervisor.job.main_loop import Job
from tests.fixtures.job_toml import job_data, write_toml
from tests.fixtures.real_job import assert_every_prompt_once, query, run_job, wait_for
from tests.job.test_reload_running_job import attach

pytestmark = pytest.mark.slow
SLOW = {"sim-time-scale": 10.0, "context-length": 4096}


def _flags(job: Job) -> set[object]:
    assert job.fleet is not None
    return {s.servers.flags.get("context-length") for s in job.fleet.servers.values()}


async def test_a_reload_below_the_live_max_tokens_is_refused(tmp_path: Path) -> None:
    data = job_data(tmp_path, servers=2, prompts=200, flags=SLOW)
    path = write_toml(tmp_path / "job.toml", data)
    cfg = await anyio.to_thread.run_sync(load_config, path)
    lines: list[str] = []

    async def drive(job: Job) -> None:
        await attach(job, path)
        assert job.dispatcher is not None
        await job.dispatcher.set_max_tokens(3000, "operator")
        # The file's own max tokens (256) is below the new context length: only the live
        # value shows the reload would fail every request.
        data["servers"]["flags"]["context-length"] = 2048
        write_toml(path, data)
        lines.append(await job.reload("systemd"))
        assert _flags(job) == {4096}
        assert job.live.context_length == 4096 and job.dispatcher.max_tokens == 3000

    _, result = await run_job(cfg, drive, timeout_s=150)
    assert_every_prompt_once(cfg, result, 200)
    assert lines[0].startswith("reload refused: reload: servers.flags: context-length 2048 is "
                               "not above the live max tokens (3000)"), lines
    assert lines[0].endswith("nothing applied")
    assert query(cfg, "SELECT count(*) FROM events WHERE kind = 'server_retune'") == [(0,)]


async def test_raised_max_tokens_waits_for_the_roll_that_raises_the_context(
        tmp_path: Path) -> None:
    data = job_data(tmp_path, servers=2, prompts=300, flags=SLOW)
    path = write_toml(tmp_path / "job.toml", data)
    cfg = await anyio.to_thread.run_sync(load_config, path)
    seen: list[int] = []

    async def drive(job: Job) -> None:
        await attach(job, path)
        assert job.dispatcher is not None
        data["servers"]["flags"]["context-length"] = 8192
        data["generation"]["max_tokens"] = 6000
        write_toml(path, data)
        line = await job.reload("systemd")
        assert line.startswith("reload applied") and line.endswith("(rolling restart of "
                                                                   "the servers)"), line
        # Not yet: both servers still run with 4096, where 6000 would fail every request.
        seen.append(job.dispatcher.max_tokens)
        await wait_for(lambda: job.dispatcher.max_tokens == 6000, "max tokens after the roll",
                       timeout_s=90)
        seen.append(job.dispatcher.max_tokens)
        assert _flags(job) == {8192}

    _, result = await run_job(cfg, drive, timeout_s=180)
    assert seen == [256, 6000]
    assert_every_prompt_once(cfg, result, 300)
    # No request was sent with 6000 to a server still at 4096: nothing failed for it.
    assert query(cfg, "SELECT count(*) FROM prompts WHERE error LIKE '%context%'") == [(0,)]
    [(detail,)] = query(cfg, "SELECT detail FROM events WHERE kind = 'max_tokens'")
    assert json.loads(detail) == {"from": 256, "to": 6000}
