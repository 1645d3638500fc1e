"""The canary's warm-up waits for one whole batch to turn over, not only a few answers: the
batch it started with began together on an empty cache, and a flag that matters only for a
full, mixed batch has not been tried until that batch is gone."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from supervisor.config import TuneSection
from supervisor.servers.server_state import ServerState
from supervisor.tune.fleet_window import FleetWindow
from supervisor.tune.measure import turnover_answers

pytestmark = pytest.mark.anyio


class Clock:
    """Monotonic time that moves 10 s at every sample the tuner takes."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 10.0
        return self.now


def fleet_of(slots: int, answers: list[int]) -> tuple[Any, Any]:
    """A canary with `slots` slots whose answer count reads from `answers` (shared, mutable)."""
    snap = SimpleNamespace(name="gpu0", state=ServerState.READY, state_reason="ok",
                           max_running=slots, gpus=[0], sglang=SimpleNamespace())
    fleet = SimpleNamespace(servers={"gpu0": None}, snapshot=lambda: [snap])
    dispatcher = SimpleNamespace(progress=lambda name: SimpleNamespace(
        kept_tokens=answers[0] * 100, answered=answers[0]))
    return fleet, dispatcher


def test_turnover_is_the_larger_of_the_answers_asked_and_the_slots() -> None:
    assert turnover_answers(5, 32) == 32
    assert turnover_answers(50, 32) == 50
    assert turnover_answers(5, 0) == 5     # slots not known: the configured answers


async def test_warm_up_waits_for_as_many_answers_as_the_canary_has_slots() -> None:
    answers = [0]
    fleet, dispatcher = fleet_of(32, answers)
    cfg = replace(TuneSection(), warmup_s=60.0, warmup_answers=5, sample_s=0.001,
                  max_window_s=10_000.0)
    window = FleetWindow(fleet, dispatcher, lambda: cfg, Clock())
    seen: list[int] = []

    async def answer_slowly() -> None:
        # One answer per 5 ms, far past warmup_s on the fake clock before the 32nd.
        for _ in range(40):
            await anyio.sleep(0.005)
            answers[0] += 1

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_slowly)
            assert await window.warm_up("gpu0") is None
            seen.append(answers[0])
            tg.cancel_scope.cancel()
    assert seen[0] >= 32, seen


async def test_warm_up_ends_at_the_window_length_when_the_batch_never_turns_over() -> None:
    fleet, dispatcher = fleet_of(32, [3])
    cfg = replace(TuneSection(), warmup_s=60.0, warmup_answers=5, sample_s=0.001,
                  max_window_s=300.0)
    clock = Clock()
    with anyio.fail_after(20):
        assert await FleetWindow(fleet, dispatcher, lambda: cfg, clock).warm_up("gpu0") is None
    assert 300.0 <= clock.now <= 400.0


async def test_a_canary_that_leaves_ready_during_warm_up_says_why() -> None:
    fleet, dispatcher = fleet_of(32, [0])
    fleet.snapshot()[0].state = ServerState.BACKOFF
    fleet.snapshot()[0].state_reason = "exited: out of memory"
    cfg = replace(TuneSection(), sample_s=0.001)
    with anyio.fail_after(20):
        why = await FleetWindow(fleet, dispatcher, lambda: cfg, Clock()).warm_up("gpu0")
    assert why == "BACKOFF: exited: out of memory"
