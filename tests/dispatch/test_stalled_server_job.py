"""Stalled requests on a real job: the real Job (fleet, dispatcher, store, shards) on one
simulated SGLang server that stalls mid-job. Its health checks keep passing and, with
streaming, each stalled request ends (aborted, retried), so only the stall count can tell the
server is hung; it is restarted as such and every prompt still lands in the shards once."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from supervisor.dispatch.event_fold import named_requests
from supervisor.job.main_loop import Job
from tests.fixtures.real_job import (
    completed_on,
    expected_ids,
    job_config,
    query,
    run_job,
    shard_ids,
    sim_fault,
    transitions,
    wait_fleet,
    wait_for,
)

# The whole Job on simulated servers: an end-to-end test (the slow tier).
pytestmark = pytest.mark.slow


async def test_stalls_restart_the_server_as_hung_and_every_prompt_lands_once(
        tmp_path: Path) -> None:
    prompts = 120
    # The progress watchdog's own rule (nothing completed for hang_timeout_s) kept far out
    # of reach: each stall ends its request, so only the stall count can call the hang.
    cfg = job_config(tmp_path, servers=1, prompts=prompts, hang_timeout_s=60.0)
    cfg = replace(cfg, dispatch=replace(cfg.dispatch, stall_s=0.3, max_attempts=5))
    port = cfg.servers.base_port

    async def inject(job: Job) -> None:
        await wait_fleet(job)
        await wait_for(lambda: completed_on(job, "gpu0") >= 20, "20 completions")
        await sim_fault(port, "stall")

    _, result = await run_job(cfg, inject)
    assert result.finished, result.reason
    ids = shard_ids(cfg)
    assert len(ids) == len(set(ids)), "a prompt is in the shards twice"
    assert sorted(ids) == expected_ids(prompts)
    assert query(cfg, "SELECT status, count(*) FROM prompts GROUP BY status") == \
        [("done", prompts)]

    path = [t.to for t in transitions(cfg, "gpu0")]
    assert path == ["STARTING", "READY", "STOPPING", "BACKOFF", "STARTING", "READY",
                    "STOPPING", "STOPPED"], path
    backoff = transitions(cfg, "gpu0")[3]
    assert backoff.detail["exit_kind"] == "stall"
    assert backoff.reason.startswith("stall: hang: 3 requests stalled"), backoff.reason

    stalls = [json.loads(d) for (d,) in query(
        cfg, "SELECT detail FROM events WHERE kind = 'request_stalled' ORDER BY id")]
    # Stalls after the first of a spell are folded into summary rows (event_fold.py).
    count = sum(s["count"] for s in stalls)
    assert count >= 3
    attempts = dict(query(cfg, "SELECT id, attempts FROM prompts"))
    for s in stalls:
        for r in named_requests(s):
            assert r["rid"].startswith(r["prompt"] + "#")
            assert attempts[r["prompt"]] >= 2    # the stalled attempt counted, then answered
    # Every attempt beyond the first is a stall: prompts that never stalled were answered on
    # their first attempt (those cut off by the restart went back without counting one).
    assert sum(n - 1 for n in attempts.values()) == count
