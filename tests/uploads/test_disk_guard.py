"""The disk guard: low free space under the shard directory pauses dispatch, space coming
back resumes it; the free-space reading is injected, the job is real."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio

from supervisor.demo.config import demo_config
from supervisor.demo.prompts import write_demo_prompts
from supervisor.gpu.fake_source import FakeGpuSource
from supervisor.job.main_loop import Job
from supervisor.uploads import disk_guard
from supervisor.uploads.disk_guard import DiskGuard
from tests.fixtures.ports import free_base_port
from tests.fixtures.waiting import until

MB = 1_000_000


def test_pauses_below_the_threshold_and_resumes_only_past_the_margin(tmp_path):
    free = [500 * MB]
    guard = DiskGuard(tmp_path, 100 * MB, free_bytes=lambda p: free[0])
    assert guard.check() is None and guard.paused_reason() is None
    free[0] = 99 * MB
    reason = guard.check()
    assert reason and "low disk" in reason and "99 MB free" in reason and str(tmp_path) in reason
    assert guard.paused_reason() == reason
    free[0] = 105 * MB                     # above the line, inside the margin: still paused
    assert guard.check() == reason
    free[0] = 111 * MB
    assert guard.check() is None and guard.last_free == 111 * MB


def test_an_unreadable_disk_keeps_the_last_verdict(tmp_path):
    readings: list[object] = [1 * MB, OSError(5, "Input/output error"), 500 * MB]

    def free(path: Path) -> int:
        value = readings.pop(0)
        if isinstance(value, Exception):
            raise value
        return int(value)  # type: ignore[call-overload]

    guard = DiskGuard(tmp_path, 100 * MB, free_bytes=free)
    assert guard.check()
    assert guard.check()                    # the error: still paused
    assert guard.check() is None


def test_a_zero_threshold_never_pauses(tmp_path):
    assert DiskGuard(tmp_path, 0, free_bytes=lambda p: 0).check() is None


def test_the_real_reading_is_this_disks_free_space(tmp_path):
    assert disk_guard.disk_free_bytes(tmp_path) > 0


async def test_a_job_pauses_on_low_disk_and_finishes_once_space_returns(tmp_path, monkeypatch):
    free = [10 * MB]
    monkeypatch.setattr(disk_guard, "disk_free_bytes", lambda path: free[0])
    prompts = tmp_path / "prompts.jsonl"
    write_demo_prompts(prompts, 300)
    cfg = demo_config(tmp_path, servers=1, prompts_file=prompts, output="shards",
                      # Room for the simulator's long thinking: at 512 most answers stop
                      # inside it and the quality gate pauses before the disk does.
                      max_tokens=8192, endpoint_url=None, base_port=free_base_port(1),
                      sim_flags={"sim-instant": True, "sim-startup-s": 0.5})
    statuses: list = []
    job = Job(cfg, on_status=statuses.append, status_interval_s=0.1,
              gpu_source=FakeGpuSource(1), handle_signals=False)
    results: list = []

    async def run() -> None:
        results.append(await job.run())

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await until(lambda: statuses and any(str(s.state) == "READY"
                                             for s in statuses[-1].servers),
                    "a server READY", 60.0)
        seen = len(statuses)
        await until(lambda: len(statuses) >= seen + 5,       # a server ready, and waiting
                    "five more status snapshots", 60.0)
        s = statuses[-1]
        assert s.done == 0 and s.in_flight == 0 and s.pending == 300
        assert "low disk" in s.dispatch.paused["disk"] and s.disk_paused
        free[0] = 10_000 * MB
        await until(lambda: bool(results), "the job's end", 60.0)
    [result] = results
    assert result.finished
    con = sqlite3.connect(tmp_path / "job.db")
    try:
        events = con.execute("select kind, subject, actor from events "
                             "where kind in ('paused', 'resumed') order by id").fetchall()
        uploaded = con.execute("select count(*), sum(status = 'uploaded') from shards").fetchone()
    finally:
        con.close()
    assert events == [("paused", "disk", "disk-guard"), ("resumed", "disk", "disk-guard")]
    # A local output: each shard checked in place and counted as delivered, files kept.
    assert uploaded == (1, 1)
    assert len(list((tmp_path / "shards").glob("*.jsonl"))) == 1

