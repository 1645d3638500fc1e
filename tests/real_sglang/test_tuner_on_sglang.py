"""The tuner on the real SGLang 0.5.23 CPU server (issue 39 item 7): a search over
`--max-running-requests` on one canary ends at a value that a separate, offline measurement
of the same server calls best.

The offline measurement is SGLang's own tuning method in small (its repository's
`benchmark/autotune/tune_server_args.py`: synthetic closed-loop load, the job stopped): one
server started with the largest candidate and the job's other flags, then, per candidate N,
N clients in a closed loop sending the job's own request bodies, completion tokens per
second over a fixed span after a warm-up. With N clients and at least N slots SGLang runs N
requests at once: the batch a server started with `--max-running-requests N` and kept full
runs, without a restart per value. "Best" is every value within OFFLINE_TOLERANCE of the
fastest: two values whose figures differ by less than that are one value to this machine
(its decode speed swings with load), and the tuner, which keeps a step only when it beats
its measured noise, may stop at either.

The search itself runs in a real job on one real server (the canary alone: the weaker
before/after measure, said as such in the status), starting from 2 running requests, over
4, 8 and 16 with a KV pool that holds about ten answers: the top is inside the range.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from supervisor.config import GenerationSection, TuneSection
from supervisor.contract.tuning import FlagRange, TrialVerdict, TuneStartRequest, TuneState
from supervisor.job.main_loop import Job
from supervisor.sglang.chat_request import request_body
from tests.fixtures.real_job import query, run_job, wait_fleet, wait_for
from tests.fixtures.real_sglang import (
    one_real_job_at_a_time,
    sglang_cpu_dir,
    start_real_sglang,
    whole_jobs_skipped,
)
from tests.real_sglang.test_daemon_on_sglang import CPU_ENV, real_config

pytestmark = [pytest.mark.slow, pytest.mark.real_sglang, pytest.mark.timeout(1500)]

WHY_NOT = whole_jobs_skipped()
if WHY_NOT is not None:
    pytestmark.append(pytest.mark.skip(reason=f"real SGLang tier: {WHY_NOT}"))

MRR = "max-running-requests"
START = 2
VALUES = (4, 8, 16)               # the search's steps, in order (the space's values)
MAX_TOKENS = 64
OFFLINE_WARM_S = 3.0
OFFLINE_SPAN_S = 8.0
OFFLINE_TOLERANCE = 0.15
# The job's flags apart from the running requests (test_daemon_on_sglang.real_config). A
# KV pool of 1,024 tokens holds about ten of these answers (a demo prompt and its 64
# tokens, ~100 tokens): batching pays up to 8 on this CPU (1 -> 8 measured 245, 435, 747,
# 1,106 tok/s with a pool that held them all), and 16 no longer fits: SGLang admits what
# its estimate allows and retracts when the answers grow, so the step to 16 must not pay.
POOL_FLAGS = {"max-total-tokens": 1024, "context-length": 2048}
# Windows of seconds: this server's steps below the top are +50% or more, its noise over
# such a window 3-4% (measured: 15 s windows gave 3.1-3.5%).
TUNE = TuneSection(min_window_s=10.0, max_window_s=30.0, min_answers=20, warmup_s=3.0,
                   warmup_answers=4, sample_s=1.0, noise_k=3.0, max_trials=len(VALUES),
                   long_batch=False)


def _bodies(prompts_file: str | Path, gen: GenerationSection, n: int) -> list[dict[str, Any]]:
    """The job's first `n` prompts as the daemon sends them (streamed, the usage at the end),
    each needing a request id of its own per send."""
    model = str(sglang_cpu_dir() / "tiny")
    out = []
    with open(prompts_file, encoding="utf-8") as f:
        for line, _ in zip(f, range(n), strict=False):
            messages = json.loads(line)["messages"]
            out.append(request_body(model, messages, gen, MAX_TOKENS, rid="offline"))
    return out


def _usage_tokens(sse: str) -> int:
    """The completion tokens of a streamed answer: its last chunk with a usage."""
    tokens = 0
    # By LF, as SSE is: a random-weight model's text may hold U+0085, which splitlines cuts.
    for line in sse.split("\n"):
        if line.startswith("data: {") and '"usage"' in line:
            usage = json.loads(line[len("data: "):]).get("usage")
            if usage:
                tokens = int(usage["completion_tokens"])
    return tokens


async def _closed_loop(url: str, bodies: list[dict[str, Any]], clients: int) -> float:
    """Completion tokens per second over OFFLINE_SPAN_S, after OFFLINE_WARM_S of the same
    load: `clients` requests in flight at every moment."""
    counted = {"tokens": 0}
    measuring = {"from": float("inf")}
    sent = iter(range(10**9))

    async def client(http: httpx.AsyncClient, stop_at: float) -> None:
        while time.monotonic() < stop_at:
            i = next(sent)
            body = {**bodies[i % len(bodies)], "rid": f"offline-{clients}-{i}"}
            resp = await http.post(url + "/v1/chat/completions", json=body)
            resp.raise_for_status()
            if time.monotonic() >= measuring["from"]:
                counted["tokens"] += _usage_tokens(resp.text)

    async with httpx.AsyncClient(trust_env=False, timeout=120.0) as http:
        began = time.monotonic()
        measuring["from"] = began + OFFLINE_WARM_S
        stop_at = measuring["from"] + OFFLINE_SPAN_S
        async with anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(client, http, stop_at)
        # Answers that ended after stop_at count, and so does the time they took.
        return counted["tokens"] / max(1e-9, time.monotonic() - measuring["from"])


async def offline_curve(tmp_path: Path, bodies: list[dict[str, Any]]) -> dict[int, float]:
    """tok/s per running-request count, on one server started with the largest."""
    values = (START, *VALUES)
    flags = [f"--{k}={v}" for k, v in {**POOL_FLAGS, MRR: max(values)}.items()]
    server = await anyio.to_thread.run_sync(start_real_sglang, tmp_path / "offline.log", *flags)
    try:
        return {n: await _closed_loop(server.base_url, bodies, n) for n in values}
    finally:
        await anyio.to_thread.run_sync(server.stop)


async def test_a_search_over_running_requests_ends_where_an_offline_measurement_does(
        tmp_path: Path) -> None:
    prompts = 6000
    cfg = real_config(tmp_path / "job", prompts=prompts, max_tokens=MAX_TOKENS, count=1,
                      flags={**POOL_FLAGS, MRR: START})
    cfg = replace(cfg, tune=TUNE)
    bodies = _bodies(cfg.job.prompts, cfg.generation, 200)
    seen: dict[str, Any] = {}

    async def drive(job: Job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: str(fleet.servers["gpu0"].state) == "READY"
                       and job.tuner is not None and job.task_group is not None,
                       "the real server READY", timeout_s=600)
        assert job.tuner is not None and job.task_group is not None
        tuner = job.tuner
        await tuner.start(TuneStartRequest(space=(FlagRange(MRR, VALUES),), server="gpu0",
                                           force=True), "test", job.task_group)
        await wait_for(lambda: not tuner.running, "the search to end", timeout_s=900)
        seen["tuning"] = tuner.tuning()
        seen["flags"] = fleet.flags("gpu0")
        job.request_stop("test: the search is over")

    with one_real_job_at_a_time():
        curve = await offline_curve(tmp_path, bodies)
        await run_job(cfg, drive, timeout_s=1200,
                                  base_env={**os.environ, **CPU_ENV})
    tuning = seen["tuning"]
    trials = [(t.changed, t.verdict, t.gain, t.noise, t.answers, t.window_s)
              for t in tuning.trials]
    fastest = max(curve.values())
    best = {n for n, tok_s in curve.items() if tok_s >= (1 - OFFLINE_TOLERANCE) * fastest}
    found = seen["flags"][MRR]
    said = f"offline tok/s {curve}, best {sorted(best)}; trials {trials}; found {found}"
    print(said)
    assert tuning.state is TuneState.DONE and tuning.weak, (tuning.reason, said)
    assert found in best, said
    # The search walks up one value a trial and stops at the first that does not help: it
    # never spends more than the values above the start.
    assert len(tuning.trials) <= len(VALUES), said
    kept = [t for t in tuning.trials if t.verdict is TrialVerdict.KEPT]
    assert kept == list(tuning.trials[:len(kept)]), said
    # Each kept step is a real gain offline too, not noise the window took for one.
    steps = [START, *[int(t.changed.rsplit(" ", 1)[1]) for t in kept]]
    for low, high in zip(steps, steps[1:], strict=False):
        assert curve[high] > curve[low], said
    # The trials are in the table an auditor reads, with their figures.
    rows = query(cfg, "SELECT changed, verdict, ratio_before, ratio_after FROM tune_trials "
                      "ORDER BY id")
    assert [(r[0], r[1]) for r in rows] == [(t.changed, t.verdict.value)
                                            for t in tuning.trials], said
    assert all(r[2] and r[3] for r in rows), rows
    # Nothing lost or twice while the canary restarted: every answer recorded once.
    assert query(cfg, "SELECT count(*) FROM prompts WHERE status = 'failed'") == [(0,)]
    assert query(cfg, "SELECT max(attempts) FROM prompts WHERE status = 'done'") == [(1,)]
