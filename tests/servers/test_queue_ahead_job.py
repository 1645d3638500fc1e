"""The queue ahead (dispatch.queue_ahead) on a real job: the Job in-process, simulated SGLang
servers as child processes (loopback HTTP, their own /metrics), a real state DB. The
requests we keep waiting in SGLang's queue are expected there: the saturation guard and the
over-commit flag do not act on them, one that waits longer than dispatch.stall_s while the
server streams for others is waiting, not stalled, a pause lets them finish and sends no
more, and a rolling restart or a graceful stop with them on the wire leaves every prompt
once in the output."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.contract.pause_sources import PauseSource
from supervisor.job.main_loop import Job
from supervisor.servers.fleet import RollingResult
from tests.fixtures.real_job import (
    SLOTS,
    assert_every_prompt_once,
    completed_on,
    in_flight_on,
    job_config,
    query,
    run_job,
    sim_state,
    transitions,
    wait_fleet,
    wait_for,
)

pytestmark = pytest.mark.slow

AHEAD = 3


def with_ahead(cfg: Any, ahead: int = AHEAD, **dispatch: Any) -> Any:
    return replace(cfg, dispatch=replace(cfg.dispatch, queue_ahead=ahead, **dispatch))


SLOW_PROMPTS = 200


def slow_one_server(tmp_path: Path) -> Any:
    """One server at about 1 s a request (256 tokens at 50 tok/s x 5), its queue ahead on."""
    return with_ahead(job_config(tmp_path, servers=1, prompts=SLOW_PROMPTS,
                                 flags={"sim-time-scale": 5.0}))


async def busy_and_queued(job: Job) -> tuple[int, int]:
    """Once gpu0 has answered 10 and runs every slot with the queue ahead waiting: its
    answers and its requests on the wire, read with no await after the wait."""
    await wait_fleet(job)
    await wait_for(lambda: completed_on(job, "gpu0") >= 10, "10 done")
    await wait_for(lambda: in_flight_on(job, "gpu0") == SLOTS + AHEAD,
                   "every slot busy and the queue ahead waiting")
    return completed_on(job, "gpu0"), in_flight_on(job, "gpu0")


def events(cfg: Any, kind: str) -> list[dict]:
    return [json.loads(d) for (d,) in query(
        cfg, "SELECT detail FROM events WHERE kind = ? ORDER BY id", kind)]


async def test_the_guard_and_the_flag_leave_our_own_queue_ahead_alone(tmp_path: Path) -> None:
    cfg = job_config(tmp_path, servers=1, prompts=20_000, flags={"enable-metrics": True})
    # A guard quick to act: 2 s calm, 1 s settle, polled every 0.2 s.
    cfg = with_ahead(cfg, saturation_floor=1, saturation_calm_s=2.0)
    samples: list[tuple[int, int | None, int | None, int, bool]] = []

    async def drive(job: Job) -> None:
        fleet = await wait_fleet(job)
        assert job.dispatcher is not None
        d = job.dispatcher
        await wait_for(lambda: completed_on(job, "gpu0") >= 50, "a busy start", timeout_s=60)
        # Eight seconds: four calm intervals, eight settle times (bounded: 80 samples).
        for _ in range(80):
            lim = d.inflight_limit("gpu0")
            v = fleet.servers["gpu0"].ready.sglang.view
            samples.append((in_flight_on(job, "gpu0"), v.running, v.queued,
                            lim.limit if lim else -1, v.overcommitted))
            await anyio.sleep(0.1)
        job.request_stop("test over")

    _, result = await run_job(cfg, drive, timeout_s=110)
    assert result.reason == "stopped by test over"
    # The queue ahead was there: our in flight its slots and three more, SGLang running all
    # its slots and queueing ours (at least min_queue 2, the flag's own threshold).
    assert max(s[0] for s in samples) == SLOTS + AHEAD, samples
    assert any(r == SLOTS and q is not None and q >= 2 for _, r, q, _, _ in samples), samples
    # ... and nothing took it for over-commitment.
    assert all(lim == SLOTS and not flagged for _, _, _, lim, flagged in samples), samples
    assert events(cfg, "inflight_limit") == [] and events(cfg, "server_overcommit") == []
    [ready] = [t for t in transitions(cfg, "gpu0") if t.to == "READY"]
    assert ready.detail["queue_ahead"] == AHEAD, ready


async def test_a_request_queued_ahead_longer_than_stall_s_waits_and_is_never_stalled(
        tmp_path: Path) -> None:
    # Two slots, two more queued: 256 tokens at 50 tok/s x 2 = 2.6 s a request, so each
    # queued request is silent for seconds while its server streams for the running ones,
    # far past stall_s.
    prompts = 12
    cfg = job_config(tmp_path, servers=1, prompts=prompts,
                     flags={"max-running-requests": 2, "sim-time-scale": 2.0})
    cfg = with_ahead(cfg, 2, stall_s=0.5, wait_s=120.0, stall_hang_count=1)
    waiting: list[int] = []

    async def watch(job: Job) -> None:
        await wait_fleet(job)
        assert job.dispatcher is not None
        d = job.dispatcher
        for _ in range(600):                # bounded: 60 s, the job ends well before
            waiting.append(d.progress("gpu0").waiting)
            if job.last_status is not None and job.last_status.remaining == 0:
                break
            await anyio.sleep(0.1)

    _, result = await run_job(cfg, watch, timeout_s=90)
    assert_every_prompt_once(cfg, result, prompts)
    # Shown as waiting at some point; never aborted (every abort of a silent stream, a wait
    # too, is a request_stalled event), never a stall (one would have restarted the server
    # as hung: stall_hang_count 1).
    assert max(waiting) >= 1, waiting
    assert events(cfg, "request_stalled") == []
    # One READY life, never restarted.
    assert [t.to for t in transitions(cfg, "gpu0")].count("READY") == 1


async def test_a_rolling_restart_with_requests_queued_ahead_leaves_every_prompt_once(
        tmp_path: Path) -> None:
    prompts = 900
    names = ("gpu0", "gpu1")
    cfg = with_ahead(job_config(tmp_path, servers=2, prompts=prompts))
    seen: dict[str, Any] = {}

    async def operate(job: Job) -> None:
        fleet = await wait_fleet(job)
        assert job.dispatcher is not None
        d = job.dispatcher
        await wait_for(lambda: all(completed_on(job, n) >= 20 for n in names),
                       "both servers serving")
        await wait_for(lambda: in_flight_on(job, "gpu0") == SLOTS + AHEAD,
                       "gpu0's slots full and its queue ahead waiting")
        # Before the restart: the new processes start their peaks again.
        seen["servers"] = [(await sim_state(cfg.servers.base_port + i))["peak_running"]
                           for i in range(2)]
        seen["restart"] = await fleet.restart(None, "alice")
        seen["peaks"] = [d.progress(n).peak_in_flight for n in names]
        await d.set_max_tokens(16, "alice")     # the rest ends quickly

    _, result = await run_job(cfg, operate, timeout_s=110)
    assert_every_prompt_once(cfg, result, prompts)
    assert seen["restart"] == RollingResult(names)
    # The queue ahead was on the wire, and the servers never ran more than their slots.
    assert seen["peaks"] == [SLOTS + AHEAD] * 2, seen
    assert seen["servers"] == [SLOTS] * 2, seen


async def test_a_graceful_stop_with_requests_queued_ahead_finishes_them_all_once(
        tmp_path: Path) -> None:
    cfg, prompts = slow_one_server(tmp_path), SLOW_PROMPTS
    at: dict[str, int] = {}

    async def stop_when_queued(job: Job) -> None:
        at["done"], at["in_flight"] = await busy_and_queued(job)
        job.request_stop("SIGTERM")

    _, stopped = await run_job(cfg, stop_when_queued)
    assert stopped.reason == "stopped by SIGTERM" and not stopped.finished
    [ev] = events(cfg, "job_stopped")
    # The queued ones too ran to their end within the grace: none cut, none requeued.
    assert ev["finished_in_grace"] == at["in_flight"] == SLOTS + AHEAD, ev
    assert ev["requeued"] == 0 and ev["cut_short"] is None, ev
    # Started again, the job finishes: each prompt once, none answered twice.
    _, again = await run_job(cfg)
    assert_every_prompt_once(cfg, again, prompts)


async def test_a_pause_lets_the_queued_ahead_finish_and_sends_nothing_more(
        tmp_path: Path) -> None:
    cfg, prompts = slow_one_server(tmp_path), SLOW_PROMPTS
    at: dict[str, int] = {}

    async def pause_when_queued(job: Job) -> None:
        at["done"], at["in_flight"] = await busy_and_queued(job)
        # No await between the reading and the pause taking hold (pauses.py sets it before
        # its first await): the wire holds exactly these.
        assert job.dispatcher is not None
        d = job.dispatcher
        await d.pause(PauseSource.OPERATOR, "test: hold", "test")
        await wait_for(lambda: in_flight_on(job, "gpu0") == 0, "the wire empty")
        # Those on the wire at the pause, queued ones included, answered; none sent after.
        at["after"] = completed_on(job, "gpu0")
        await d.resume(PauseSource.OPERATOR, "test")

    _, result = await run_job(cfg, pause_when_queued, timeout_s=120)
    assert_every_prompt_once(cfg, result, prompts)
    assert at["after"] == at["done"] + at["in_flight"] == at["done"] + SLOTS + AHEAD, at
