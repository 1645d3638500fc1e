"""Graceful stop on a real job (simulated SGLang servers as child processes, a real state DB):
requests in flight finish within the grace and are recorded, nothing new is claimed, the rest
is requeued when the grace runs out or a second stop cuts it short; a finished job started
again launches no server."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from supervisor.job.main_loop import Job
from supervisor.job.progress_line import progress_line
from supervisor.job.status import JobStatus
from tests.fixtures.real_job import (
    assert_every_prompt_once,
    assert_nothing_left,
    completed_on,
    in_flight_on,
    job_config,
    query,
    run_job,
    transitions,
    wait_fleet,
    wait_for,
)

pytestmark = pytest.mark.slow
# 256 tokens at 50 tok/s × scale: about 1 s a request at 5, 3 s at 1.7.
SLOW = {"sim-time-scale": 5.0}
SLOWER = {"sim-time-scale": 1.7}


def stopped_event(cfg) -> dict:
    rows = query(cfg, "SELECT detail FROM events WHERE kind = 'job_stopped' ORDER BY id")
    return json.loads(rows[-1][0])


async def stop_when_busy(job: Job, at: dict, *, completions: int = 10, times: int = 1) -> None:
    await wait_fleet(job)
    await wait_for(lambda: completed_on(job, "gpu0") >= completions, f"{completions} done")
    await wait_for(lambda: in_flight_on(job, "gpu0") == 8, "every slot busy")
    at["done"] = completed_on(job, "gpu0")
    at["in_flight"] = in_flight_on(job, "gpu0")
    for _ in range(times):
        job.request_stop("SIGTERM")


async def test_requests_in_flight_finish_in_the_grace_and_nothing_new_is_claimed(tmp_path: Path):
    cfg = job_config(tmp_path, servers=1, prompts=200, flags=SLOW)
    at: dict = {}
    seen: list[JobStatus] = []
    _, result = await run_job(cfg, lambda job: stop_when_busy(job, at), on_status=seen.append)
    assert result.reason == "stopped by SIGTERM" and not result.finished
    ev = stopped_event(cfg)
    # Each request in flight at the stop was recorded, none requeued, none cut.
    assert ev["requeued"] == 0 and ev["cut_short"] is None and ev["discarded_tokens"] == 0, ev
    assert ev["finished_in_grace"] == at["in_flight"] == 8, ev
    assert ev["waited_s"] < ev["grace_s"]
    done = query(cfg, "SELECT count(*) FROM prompts WHERE status = 'done'")[0][0]
    assert done == at["done"] + at["in_flight"]
    assert query(cfg, "SELECT count(*) FROM prompts WHERE status = 'in_flight'") == [(0,)]
    assert query(cfg, "SELECT max(attempts) FROM prompts WHERE status = 'pending'") == [(0,)]
    # While draining, the snapshot and STATUS= said so.
    draining = [s for s in seen if s.stopping]
    assert draining and draining[0].stopping.startswith("draining: ")
    assert progress_line(draining[0]).startswith("DRAINING: ")
    assert [t.to for t in transitions(cfg, "gpu0")][-2:] == ["STOPPING", "STOPPED"]
    assert_nothing_left(cfg)


async def test_grace_running_out_requeues_the_rest_and_estimates_the_lost_tokens(tmp_path: Path):
    cfg = job_config(tmp_path, servers=1, prompts=200, flags=SLOWER)
    cfg = type(cfg)(**{**cfg.__dict__, "dispatch": replace(cfg.dispatch, stop_grace_s=0.5)})
    at: dict = {}
    _, result = await run_job(cfg, lambda job: stop_when_busy(job, at, completions=8))
    ev = stopped_event(cfg)
    assert ev["cut_short"] == "grace of 0.5 s ran out", ev
    assert ev["requeued"] >= 1 and ev["requeued"] + ev["finished_in_grace"] == at["in_flight"]
    # Each cut request had decoded for at least the grace at ~85 tok/s: tokens were lost.
    assert ev["discarded_tokens"] > 0
    assert query(cfg, "SELECT count(*) FROM prompts WHERE status = 'in_flight'") == [(0,)]
    pending, attempts = query(cfg, "SELECT count(*), max(attempts) FROM prompts "
                                   "WHERE status = 'pending'")[0]
    assert pending == 200 - at["done"] - ev["finished_in_grace"] and attempts == 0
    assert_nothing_left(cfg)


async def test_a_second_stop_cuts_the_grace_short(tmp_path: Path):
    cfg = job_config(tmp_path, servers=1, prompts=200, flags=SLOWER)
    at: dict = {}
    started = time.monotonic()
    await run_job(cfg, lambda job: stop_when_busy(job, at, completions=8, times=2))
    ev = stopped_event(cfg)
    assert ev["cut_short"] == "second SIGTERM" and ev["requeued"] >= 1, ev
    assert ev["waited_s"] < 1.0 < ev["grace_s"]
    assert time.monotonic() - started < 60


async def test_a_finished_job_started_again_launches_no_server(tmp_path: Path):
    cfg = job_config(tmp_path, servers=2, prompts=60)
    _, first = await run_job(cfg)
    assert_every_prompt_once(cfg, first, 60)
    states_before = len(transitions(cfg))
    started = time.monotonic()
    _, again = await run_job(cfg, timeout_s=20)
    assert again.finished and again.reason == "finished"
    assert len(transitions(cfg)) == states_before, "a server was started"
    assert time.monotonic() - started < 10
    last_start = json.loads(query(cfg, "SELECT detail FROM events WHERE kind = 'job_started' "
                                       "ORDER BY id DESC LIMIT 1")[0][0])
    assert last_start["already_finished"] is True
    assert_every_prompt_once(cfg, again, 60)
