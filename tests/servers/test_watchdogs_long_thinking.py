"""The watchdogs at the pace of a real long-thinking job: simulated SGLang servers at time
scale 1 decoding 5 tokens a second per stream, every answer longer than the timeout that
watches it. Healthy servers must outlast every rule (no restart, no stall abort, every
prompt answered on its first attempt); a server that hangs after every start must still
reach FAILED, however slowly each hang is seen.

The real Job (fleet, dispatcher, store, shards) in this process, the servers as child
processes on loopback; what happened is read back from the state DB's events."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.config import JobConfig
from supervisor.contract.pause_sources import PauseSource
from supervisor.job.main_loop import Job
from supervisor.job.status import JobStatus
from supervisor.servers.server_state import ServerState
from tests.fixtures.real_job import (
    WRAPPER,
    assert_every_prompt_once,
    job_config,
    query,
    run_job,
    state_of,
    transitions,
    wait_fleet,
)

pytestmark = pytest.mark.slow

S = ServerState

TOKENS = 20                  # per answer: 4 s at 5 tok/s
SLOW = {"sim-tokens-per-s": 5, "sim-time-scale": 1, "sim-startup-s": 0.2,
        # A chunk per token (0.2 s apart), so a 1 s stall clock never fires between chunks.
        "stream-interval": 1}
HANG_TIMEOUT_S = 2.0         # half an answer
STALL_S = 1.0                # a quarter of one


def slow_job(tmp_path: Path, *, servers: int, prompts: int, flags: dict[str, Any] | None = None,
             stream: bool = True, **overrides: Any) -> JobConfig:
    cfg = job_config(tmp_path, servers=servers, prompts=prompts,
                     flags={**SLOW, "max-running-requests": 4, **(flags or {})},
                     hang_timeout_s=HANG_TIMEOUT_S, **overrides)
    return replace(cfg, generation=replace(cfg.generation, max_tokens=TOKENS),
                   dispatch=replace(cfg.dispatch, stream=stream, stall_s=STALL_S))


def assert_never_restarted(cfg: JobConfig) -> None:
    for name in ("gpu0", "gpu1")[:len(cfg.servers.gpu_list)]:
        path = [t.to for t in transitions(cfg, name)]
        assert path == ["STARTING", "READY", "STOPPING", "STOPPED"], (name, path)


def stalled_events(cfg: JobConfig) -> list[dict[str, Any]]:
    return [json.loads(d) for (d,) in query(
        cfg, "SELECT detail FROM events WHERE kind = 'request_stalled' ORDER BY id")]


@pytest.mark.parametrize("stream, metrics", [(True, False), (False, True), (False, False)],
                         ids=["streamed", "unstreamed-metrics", "unstreamed-no-signal"])
async def test_answers_longer_than_the_hang_timeout_never_restart_a_healthy_server(
        tmp_path: Path, stream: bool, metrics: bool) -> None:
    # Every answer takes twice hang_timeout_s: nothing completes for 4 s at a time, while
    # tokens flow. Streamed, the streams' tokens say so; unstreamed, SGLang's per-decode-step
    # counter; with neither, the timeout is derived from max tokens and the measured speed.
    prompts = 16
    cfg = slow_job(tmp_path, servers=2, prompts=prompts, stream=stream,
                   flags={"enable-metrics": True} if metrics else None)
    _, result = await run_job(cfg, timeout_s=90)
    assert_every_prompt_once(cfg, result, prompts)
    assert_never_restarted(cfg)
    assert stalled_events(cfg) == []


async def test_requests_queued_by_sglang_wait_while_the_server_streams_for_others(
        tmp_path: Path) -> None:
    # SGLang runs 2 at a time and we send 6: four wait in its queue, silent for a whole
    # answer (4 s, four times stall_s) while the two running stream. Waiting, not stalled:
    # no abort, no attempt, no restart; the status shows them waiting.
    prompts = 12
    cfg = slow_job(tmp_path, servers=1, prompts=prompts, flags={"max-running-requests": 2})
    cfg = replace(cfg, dispatch=replace(cfg.dispatch, max_in_flight_per_server=6))
    statuses: list[JobStatus] = []
    _, result = await run_job(cfg, timeout_s=90, on_status=statuses.append)
    assert_every_prompt_once(cfg, result, prompts)
    assert_never_restarted(cfg)
    assert stalled_events(cfg) == []
    waiting = max(s.waiting for st in statuses for s in st.servers)
    assert 1 <= waiting <= 4, waiting


async def test_a_stall_abort_on_a_queueing_server_requeues_without_an_attempt(
        tmp_path: Path) -> None:
    # As above with SGLang's /metrics read, and wait_s shorter than the queue's wait: the
    # waiting requests are aborted at wait_s, and as SGLang says it queues, each goes back
    # to pending with no attempt counted. The server is never called hung.
    prompts = 12
    cfg = slow_job(tmp_path, servers=1, prompts=prompts,
                   flags={"max-running-requests": 2, "enable-metrics": True})
    # A breaker that opens at half of 4 answers: waits are not errors, so it never does
    # (it did when it counted them, and the paused job never finished).
    cfg = replace(cfg, dispatch=replace(cfg.dispatch, max_in_flight_per_server=6,
                                        wait_s=2.0, saturation_guard=False,
                                        breaker_min_samples=4))
    _, result = await run_job(cfg, timeout_s=120)
    assert_every_prompt_once(cfg, result, prompts)       # max(attempts) == 1
    assert_never_restarted(cfg)
    stalls = stalled_events(cfg)
    assert stalls and all(s.get("waited", True) for s in stalls), stalls
    assert query(cfg, "SELECT count(*) FROM events WHERE kind = 'paused'") == [(0,)]


async def test_a_stuck_request_on_a_busy_server_waits_then_retries_without_a_restart(
        tmp_path: Path) -> None:
    # A share of the prompts get stuck halfway on their first request while the server
    # answers everyone else (--sim-stall-share). Waiting while the others stream, aborted
    # at wait_s and retried (an attempt: SGLang does not queue here); never a hang.
    prompts = 24
    cfg = slow_job(tmp_path, servers=1, prompts=prompts, flags={"sim-stall-share": 0.25})
    cfg = replace(cfg, dispatch=replace(cfg.dispatch, wait_s=3.0))
    _, result = await run_job(cfg, timeout_s=120)
    assert result.finished, result.reason
    assert_never_restarted(cfg)
    assert query(cfg, "SELECT status, count(*) FROM prompts GROUP BY status") == \
        [("done", prompts)]
    stalls = stalled_events(cfg)
    assert sum(s.get("count", 1) for s in stalls) >= 1


async def test_a_server_that_hangs_after_every_start_ends_failed_however_slowly(
        tmp_path: Path) -> None:
    # gpu1 stalls at every start (a scheduler stuck once its first answers are out): the
    # hang is seen seconds after each start, so with a window of an hour and 50 failures
    # allowed, the window alone would restart it forever. Each life answered, so the
    # unanswered count never fills; three lives in a row that each failed within 30 s of
    # serving end it FAILED, in words that say what they answered; gpu0 does the job.
    prompts = 40
    cfg = slow_job(tmp_path, servers=2, prompts=prompts, command=[sys.executable, str(WRAPPER)],
                   max_failures=50, failure_window_s=3600.0, max_unserved_failures=3,
                   max_brief_failures=3, served_after_s=30.0)
    # Stuck once its first answer is out, at every life: READY each time, then no token.
    env = {**os.environ, "SIM_BROKEN_GPUS": "1", "SIM_BROKEN_FAULT": "stall",
           "SIM_BROKEN_AFTER_REQUESTS": "1"}

    async def hold_until_failed(job: Job) -> None:
        await wait_fleet(job)
        assert job.dispatcher is not None
        held = False
        # Dispatch runs only while gpu1 is READY: gpu1 gets work at every life, and gpu0
        # cannot finish the job while gpu1 restarts (on a loaded machine gpu1's restarts
        # are slow; a hold that also paused a READY gpu1 left it no work to hang on).
        with anyio.fail_after(150):
            while state_of(job, "gpu1") is not S.FAILED:
                ready = state_of(job, "gpu1") is S.READY
                if held and ready:
                    await job.dispatcher.resume(PauseSource.OPERATOR, "test")
                    held = False
                elif not held and not ready:
                    await job.dispatcher.pause(PauseSource.OPERATOR, "while gpu1 restarts",
                                               "test")
                    held = True
                await anyio.sleep(0.05)
        if held:
            await job.dispatcher.resume(PauseSource.OPERATOR, "test")

    _, result = await run_job(cfg, hold_until_failed, base_env=env, timeout_s=180)
    assert result.finished, result.reason
    ts = transitions(cfg, "gpu1")
    failed = [t for t in ts if t.to == "FAILED"]
    assert len(failed) == 1, [t.to for t in ts]
    f = failed[0]
    answered = f.detail["answered_in_window"]
    assert f.reason.endswith(f"3 lives in a row each failed within 30 s of serving, "
                             f"answering {answered} in all, waiting for an operator"), f.reason
    # Each life answered before it stuck: none failed before answering.
    assert f.detail["answered"] >= 1 and answered >= 3
    assert f.detail["exit_kind"] == "stall" and f.detail["unserved_in_row"] == 0
    assert f.detail["brief_in_row"] == 3
    assert f.detail["failures_in_window"] == 3
    assert [t.to for t in ts].count("READY") == 3
    assert query(cfg, "SELECT status, count(*) FROM prompts GROUP BY status") == \
        [("done", prompts)]
