"""The saturation guard settling at what SGLang runs, on a real job: the Job in-process and a
simulated SGLang server (child process, loopback HTTP, its own /metrics) that runs at most 4
requests at once (`--max-running-requests 4`) and queues the rest, its KV pool nearly empty,
while the dispatcher is allowed 8 (`dispatch.max_in_flight_per_server`). That is what real
SGLang 0.5.23 does when its scheduler admits by reserved tokens (7 of 12 run, the pool a
third used): the guard must go to the 4 it runs and stay there or one above, never spiral
below it, and never read its own cut as a collapse."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from supervisor.job.main_loop import Job
from tests.fixtures.real_job import completed_on, job_config, query, run_job, wait_fleet, wait_for

# The whole Job on simulated servers: an end-to-end test (the slow tier).
pytestmark = pytest.mark.slow

ALLOWED = 8
RUNS = 4


async def test_a_server_running_fewer_than_allowed_gets_that_many_and_no_fewer(
        tmp_path: Path) -> None:
    # Answers of about a second (not the fixture's tens of ms): our request waiting in
    # SGLang's queue is then there at nearly every poll, however slowly a busy machine lets
    # the daemon refill a freed slot; with answers that end every few ms the polls could
    # miss it for a whole calm interval, and the guard rightly climbed to 6.
    cfg = job_config(tmp_path, servers=1, prompts=20_000,
                     flags={"enable-metrics": True, "max-running-requests": RUNS,
                            "sim-time-scale": 5.0})
    cfg = replace(cfg, dispatch=replace(cfg.dispatch, max_in_flight_per_server=ALLOWED,
                                        saturation_floor=1, saturation_calm_s=2.0))
    limits: list[tuple[int, int | None, int | None]] = []

    async def drive(job: Job) -> None:
        fleet = await wait_fleet(job)
        assert job.dispatcher is not None
        d = job.dispatcher
        await wait_for(lambda: completed_on(job, "gpu0") >= 50, "a busy start", timeout_s=60)
        await wait_for(lambda: (lim := d.inflight_limit("gpu0")) is not None
                       and lim.limit < ALLOWED, "the first cut", timeout_s=30)
        # Twelve seconds: six calm intervals, time for any spiral (bounded: 120 samples).
        for _ in range(120):
            lim = d.inflight_limit("gpu0")
            v = fleet.servers["gpu0"].ready.sglang.view
            limits.append((lim.limit if lim else ALLOWED, v.running, v.queued))
            await anyio.sleep(0.1)
        job.request_stop("test over")

    _, result = await run_job(cfg, drive, timeout_s=110)
    assert result.reason == "stopped by test over"
    moves = [json.loads(d) for (d,) in query(
        cfg, "SELECT detail FROM events WHERE kind = 'inflight_limit' AND subject = 'gpu0' "
             "ORDER BY id")]
    text = "\n".join(f"{m['from']} -> {m['to']}: {m['reason']}" for m in moves)
    downs = [m for m in moves if m["to"] < m["from"]]
    assert downs and downs[0]["from"] == ALLOWED, text
    # Every cut to the 4 SGLang runs, none below it, none for a "collapse".
    assert all(m["to"] == RUNS and f"to the {RUNS} SGLang runs" in m["reason"]
               for m in downs), text
    assert min(lim for lim, _, _ in limits) >= RUNS, limits
    # Settled: at 4, or at 5 with one of ours waiting in SGLang's queue -- no climb back
    # into a queue it has shown it holds.
    assert max(lim for lim, _, _ in limits[len(limits) // 2:]) <= RUNS + 1, (limits, text)
