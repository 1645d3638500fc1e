"""Rolling restart and retune under load, on real processes: nothing lost or duplicated,
at least one server serving at every moment, and the dispatcher's per-server limit follows
a retuned --max-running-requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from supervisor.job.main_loop import Job
from supervisor.servers.fleet import RollingResult
from supervisor.servers.server_state import ServerState
from tests.fixtures.real_job import (
    SLOTS,
    Transition,
    assert_every_prompt_once,
    assert_nothing_left,
    completed_on,
    job_config,
    query,
    run_job,
    sim_get,
    state_of,
    transitions,
    wait_fleet,
    wait_for,
)

pytestmark = pytest.mark.slow

S = ServerState
NAMES = ("gpu0", "gpu1")
RETUNED = 2 * SLOTS


def ready_counts(ts: list[Transition]) -> list[int]:
    """How many servers were READY after each transition, from the audit log alone."""
    states: dict[str, str] = {}
    counts = []
    for t in ts:
        states[t.subject] = t.to
        counts.append(sum(1 for s in states.values() if s == "READY"))
    return counts


async def test_rolling_restart_and_retune_under_load_lose_and_duplicate_nothing(
        tmp_path: Path) -> None:
    prompts = 1200
    cfg = job_config(tmp_path, servers=2, prompts=prompts, flags={"sim-children": 1})
    base = cfg.servers.base_port
    seen: dict[str, Any] = {}

    async def operate(job: Job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: all(completed_on(job, n) >= 20 for n in NAMES),
                       "both servers serving")
        seen["restart"] = await fleet.restart(None, "alice")
        seen["retune"] = await fleet.retune({"max-running-requests": RETUNED}, None, "alice")
        seen["limits"] = {n: fleet.servers[n].ready.endpoint.max_running for n in NAMES}
        # Let the dispatcher fill the new slots, then ask each server what it saw.
        done = {n: completed_on(job, n) for n in NAMES}
        await wait_for(lambda: all(completed_on(job, n) >= done[n] + 3 * RETUNED for n in NAMES),
                       "completions after the retune")
        assert job.dispatcher is not None
        for i, name in enumerate(NAMES):
            seen[name] = ((await sim_get(base + i, "/sim/state"))["peak_running"],
                          (await sim_get(base + i, "/server_info"))["max_running_requests"],
                          job.dispatcher.progress(name).peak_in_flight)
        assert job.last_status is not None
        seen["remaining"] = job.last_status.remaining
        assert all(state_of(job, n) is S.READY for n in NAMES)
        # Done checking: shorter answers end the job sooner (an operator knob, nothing else).
        assert job.dispatcher is not None
        await job.dispatcher.set_max_tokens(16, "alice")

    _, result = await run_job(cfg, operate, timeout_s=90)
    assert_every_prompt_once(cfg, result, prompts)
    for key in ("restart", "retune"):
        assert seen[key] == RollingResult(NAMES), seen[key]
    # The work was not over when the rolls were: they happened under load.
    assert seen["remaining"] > 0, seen["remaining"]

    # The dispatcher's limit followed the new flag, and it kept exactly that many requests
    # on each new server: all of its slots busy, and (the most it ever had on the wire to
    # that server, old limit included) never more than the new limit.
    assert seen["limits"] == {n: RETUNED for n in NAMES}
    for name in NAMES:
        server_peak, max_running_requests, dispatch_peak = seen[name]
        assert max_running_requests == RETUNED
        assert server_peak == RETUNED and dispatch_peak == RETUNED, seen[name]

    ts = transitions(cfg)
    # One server at a time: from both first READY until shutdown, never none serving.
    counts = ready_counts(ts)
    first_both = counts.index(2)
    shutdown = next(i for i, t in enumerate(ts) if t.reason == "supervisor shutting down")
    assert min(counts[first_both:shutdown]) >= 1, counts
    for name in NAMES:
        mine = [t for t in ts if t.subject == name]
        assert [t.to for t in mine] == ["STARTING", "READY"] + [
            "DRAINING", "STOPPING", "STOPPED", "STARTING", "READY"] * 2 + [
            "STOPPING", "STOPPED"], [t.to for t in mine]
        drains = [t for t in mine if t.to == "DRAINING"]
        assert [t.actor for t in drains] == ["alice", "alice"]
        assert drains[0].reason == "restart requested by alice"
        assert all(t.detail["exit_kind"] == "stopped" for t in mine if t.to == "STOPPED")
        readies = [t for t in mine if t.to == "READY"]
        assert [t.detail["max_running"] for t in readies] == [SLOTS, SLOTS, RETUNED]
        argv = [t.detail["argv"] for t in mine if t.to == "STARTING"][-1]
        i = argv.index("--max-running-requests")
        assert argv[i + 1] == str(RETUNED)
    [(detail, actor)] = query(cfg, "SELECT detail, actor FROM events WHERE kind = 'server_retune'")
    assert actor == "alice" and json.loads(detail) == {"flags": {"max-running-requests": RETUNED}}
    assert_nothing_left(cfg)
