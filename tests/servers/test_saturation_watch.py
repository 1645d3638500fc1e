"""Watching a server for saturation (supervisor/servers/saturation_watch.py): its decisions move
the dispatcher's live limit and are said once each; a new READY life starts at the max; a
reload that switches the guard off gives the max back."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from supervisor.config import DispatchSection
from supervisor.contract.event_kinds import EventKind
from supervisor.servers.inflight_limit import InFlightLimit
from supervisor.servers.saturation_watch import SaturationWatch
from supervisor.servers.sglang_view import SglangView

OVER = SglangView(polled=True, running=20, queued=9, overcommitted=True,
                  overcommit_reason="queue held over 3 polls (9 -> 9 waiting)")
CALM = SglangView(polled=True, running=20, queued=0)


class Harness:
    def __init__(self) -> None:
        self.dispatch = DispatchSection(saturation_floor=4, saturation_calm_s=3.0)
        self.limit: InFlightLimit | None = InFlightLimit(32)
        self.events: list[tuple[str, dict[str, Any]]] = []

        async def emit(kind: str, detail: dict[str, Any]) -> None:
            self.events.append((kind, detail))

        self.guard = SaturationWatch("gpu0", lambda: self.dispatch, lambda: self.limit, emit)


async def _over(h: Harness, view: SglangView = OVER, at: float = 0.0,
                in_flight: int = 32) -> None:
    """SGLang's queue held for the guard's settle time (a third of calm_s, at least 1 s)."""
    await h.guard.on_poll(view, at - 1.0, in_flight)
    await h.guard.on_poll(view, at, in_flight)


async def test_a_cut_and_the_climb_back_are_applied_and_said_once_each():
    h = Harness()
    await _over(h)
    assert h.limit is not None and h.limit.limit == 20
    assert h.limit.reason == "over-committed: queue held over 3 polls (9 -> 9 waiting)"
    for t in range(1, 20):
        await h.guard.on_poll(CALM, float(t), 20)
    assert h.limit.limit == 32 and h.limit.reason is None
    assert [(k, d["from"], d["to"], d["max"]) for k, d in h.events] == [
        (EventKind.INFLIGHT_LIMIT, 32, 20, 32), (EventKind.INFLIGHT_LIMIT, 20, 24, 32),
        (EventKind.INFLIGHT_LIMIT, 24, 28, 32), (EventKind.INFLIGHT_LIMIT, 28, 32, 32)]
    assert "lowered to the 20 SGLang runs" in h.events[0][1]["reason"]


async def test_a_new_life_starts_a_new_guard_at_the_max():
    h = Harness()
    await _over(h)
    h.limit = InFlightLimit(16)              # the server restarted: a new life's limit
    await h.guard.on_poll(CALM, 1.0, 16)
    assert h.limit.limit == 16 and len(h.events) == 1
    await _over(h, replace(OVER, running=10), 2.5, 16)
    assert h.limit.limit == 10 and h.events[-1][1]["max"] == 16


async def test_switched_off_by_a_reload_the_limit_goes_back_to_the_max():
    h = Harness()
    await _over(h)
    h.dispatch = replace(h.dispatch, saturation_guard=False)
    await h.guard.on_poll(OVER, 1.0, 20)
    assert h.limit is not None and h.limit.limit == 32
    assert h.events[-1][1]["reason"] == "the saturation guard was switched off"
    await h.guard.on_poll(OVER, 30.0, 32)    # off: nothing moves
    assert h.limit.limit == 32 and len(h.events) == 2


async def test_no_limit_no_action():
    h = Harness()
    h.limit = None                           # not serving
    await h.guard.on_poll(OVER, 0.0, 0)
    assert h.events == []


async def test_a_reload_retunes_the_guard_in_place():
    h = Harness()
    await _over(h)                                       # 32 -> 20
    h.dispatch = replace(h.dispatch, saturation_calm_s=30.0)
    for t in range(1, 20):                               # 19 s of calm: no longer enough
        await h.guard.on_poll(CALM, float(t), 20)
    assert h.limit is not None and h.limit.limit == 20 and len(h.events) == 1
    h.dispatch = replace(h.dispatch, saturation_floor=18)
    # (settle_s is now 10 s: the queue holds from 30 s)
    await h.guard.on_poll(replace(OVER, running=2), 30.0, 20)
    await _over(h, replace(OVER, running=2), 40.0, 20)
    assert h.limit.limit == 18                           # the new floor holds
