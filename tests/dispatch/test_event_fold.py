"""Per-request events folded to one row per server per window (supervisor/dispatch/
event_fold.py): the first of a quiet spell at once, the rest as a summary when the window
ends, nothing lost at a stop. Times come from the test, never from waiting."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from supervisor.contract.event_kinds import EventKind as K
from supervisor.dispatch.event_fold import SAMPLES, EventFold

Row = tuple[str, str, dict[str, Any], str, float]


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def fold_with_rows(clock: Clock | None = None, **kw: Any) -> tuple[EventFold, list[Row]]:
    rows: list[Row] = []

    async def write(kind: str, subject: str, detail: dict[str, Any], actor: str,
                    at: float) -> None:
        rows.append((kind, subject, detail, actor, at))
    return EventFold(write, clock=clock or Clock(), **kw), rows


def loop(i: int, part: str = "reasoning", tokens: int = 100, saved: int = 900) -> dict[str, Any]:
    return {"prompt": f"p{i}", "rid": f"p{i}#1#ab", "part": part, "tokens": tokens,
            "saved": saved, "snippet": "again and again"}


def stall(i: int, tokens: int = 40, stall_s: float = 120.0) -> dict[str, Any]:
    return {"prompt": f"s{i}", "rid": f"s{i}#1#cd", "tokens": tokens, "stall_s": stall_s}


def test_other_kinds_pass_through_untouched() -> None:
    fold, _ = fold_with_rows()
    detail = {"reason": "operator"}
    for t in range(5):
        assert fold.admit(K.PAUSED, "operator", detail, "user:ann", float(t)) is detail
    assert fold.next_deadline() is None and fold.pending() == 0


def test_first_loop_at_once_then_one_summary_per_window() -> None:
    fold, _ = fold_with_rows(window_s=30.0)
    first = fold.admit(K.LOOP_ABORTED, "gpu0", loop(0), "supervisor", 0.0)
    # The first of a quiet spell is the old per-request row, with its count.
    assert first == {"count": 1, **loop(0)}
    for i in range(1, 8):
        part = "reasoning" if i % 2 else "content"
        assert fold.admit(K.LOOP_ABORTED, "gpu0", loop(i, part, tokens=10 * i), "supervisor",
                          float(i)) is None
    assert fold.pending() == 7
    assert fold.due(29.9) == []
    (summary,) = fold.due(30.0)
    assert (summary.kind, summary.subject, summary.actor, summary.time) == \
        (K.LOOP_ABORTED, "gpu0", "supervisor", 30.0)
    d = summary.detail
    assert d["count"] == 7
    assert d["tokens"] == sum(10 * i for i in range(1, 8))
    assert d["saved"] == 7 * 900
    assert d["parts"] == {"content": 3, "reasoning": 4}
    assert (d["first_at"], d["last_at"], d["window_s"]) == (1.0, 7.0, 30.0)
    assert [s["prompt"] for s in d["samples"]] == [f"p{i}" for i in range(1, 1 + SAMPLES)]
    assert d["samples"][0] == loop(1, tokens=10)
    # The flood goes on: the next window folds too, its summary at its own end.
    assert fold.admit(K.LOOP_ABORTED, "gpu0", loop(20), "supervisor", 31.0) is None
    assert fold.due(59.0) == []
    (again,) = fold.due(60.0)
    assert again.detail["count"] == 1 and again.detail["samples"][0]["prompt"] == "p20"
    # A window with nothing in it closes: the next loop is written at once again.
    assert fold.due(90.0) == [] and fold.next_deadline() is None
    assert fold.admit(K.LOOP_ABORTED, "gpu0", loop(30), "supervisor", 95.0) == \
        {"count": 1, **loop(30)}


def test_each_server_and_kind_has_its_own_window() -> None:
    fold, _ = fold_with_rows(window_s=10.0)
    for subject in ("gpu0", "gpu1"):
        assert fold.admit(K.LOOP_ABORTED, subject, loop(0), "supervisor", 0.0) is not None
        assert fold.admit(K.REQUEST_STALLED, subject, stall(0), "supervisor", 0.0) is not None
    for i in range(1, 4):
        assert fold.admit(K.LOOP_ABORTED, "gpu0", loop(i), "supervisor", float(i)) is None
    assert fold.admit(K.REQUEST_STALLED, "gpu1", stall(1, 7, 60.0), "supervisor", 2.0) is None
    assert fold.admit(K.REQUEST_STALLED, "gpu1", stall(2, 5, 90.0), "supervisor", 3.0) is None
    got = {(e.kind, e.subject): e.detail for e in fold.due(10.0)}
    assert set(got) == {(K.LOOP_ABORTED, "gpu0"), (K.REQUEST_STALLED, "gpu1")}
    assert got[K.LOOP_ABORTED, "gpu0"]["count"] == 3
    s = got[K.REQUEST_STALLED, "gpu1"]
    # A stall summary: the tokens the stalled attempts had, the stall setting in force last.
    assert (s["count"], s["tokens"], s["stall_s"]) == (2, 12, 90.0)
    assert [x["rid"] for x in s["samples"]] == ["s1#1#cd", "s2#1#cd"]
    assert "parts" not in s and "saved" not in s


def test_the_count_over_every_row_is_the_number_of_requests() -> None:
    """Whatever the timing, the rows written at once and the summaries add up to every
    request admitted, and the summed tokens to theirs."""
    clock = Clock(0.0)
    fold, _ = fold_with_rows(clock, window_s=30.0)
    written: list[dict[str, Any]] = []
    times = [0, 1, 2, 29, 30, 31, 45, 61, 200, 201, 230.5, 231, 400]
    for i, t in enumerate(times):
        written += [e.detail for e in fold.due(float(t))]
        detail = fold.admit(K.LOOP_ABORTED, "gpu3", loop(i, tokens=i + 1), "supervisor",
                            float(t))
        if detail is not None:
            written.append(detail)
    written += [e.detail for e in fold.drain(500.0)]
    assert sum(d["count"] for d in written) == len(times)
    assert sum(d["tokens"] for d in written) == sum(range(1, len(times) + 1))
    assert len(written) < len(times)


def test_the_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="event fold window must be positive"):
        fold_with_rows(window_s=0.0)


async def test_close_writes_what_is_pending_and_later_events_go_one_by_one() -> None:
    clock = Clock(0.0)
    fold, rows = fold_with_rows(clock, window_s=30.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(fold.run)
        fold.admit(K.LOOP_ABORTED, "gpu0", loop(0), "supervisor", 0.0)
        for i in range(1, 4):
            fold.admit(K.LOOP_ABORTED, "gpu0", loop(i), "supervisor", float(i))
        fold.admit(K.REQUEST_STALLED, "gpu1", stall(0), "supervisor", 1.0)
        fold.admit(K.REQUEST_STALLED, "gpu1", stall(1), "supervisor", 2.0)
        clock.now = 5.0
        await fold.close()          # run() returns: the task group ends
    assert [(k, s, d["count"], at) for k, s, d, _, at in rows] == \
        [(K.LOOP_ABORTED, "gpu0", 3, 5.0), (K.REQUEST_STALLED, "gpu1", 1, 5.0)]
    assert fold.pending() == 0
    assert fold.admit(K.LOOP_ABORTED, "gpu0", loop(9), "supervisor", 6.0) == \
        {"count": 1, **loop(9)}
    assert fold.pending() == 0


async def test_close_writes_even_when_the_job_is_cancelled() -> None:
    fold, rows = fold_with_rows(Clock(0.0))
    fold.admit(K.LOOP_ABORTED, "gpu0", loop(0), "supervisor", 0.0)
    fold.admit(K.LOOP_ABORTED, "gpu0", loop(1), "supervisor", 1.0)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await fold.close()
    assert [d["count"] for _, _, d, _, _ in rows] == [1]


async def test_run_writes_a_summary_once_its_window_has_ended() -> None:
    clock = Clock(0.0)
    fold, rows = fold_with_rows(clock, window_s=30.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(fold.run)
        fold.admit(K.LOOP_ABORTED, "gpu0", loop(0), "supervisor", 0.0)
        fold.admit(K.LOOP_ABORTED, "gpu0", loop(1), "supervisor", 1.0)
        clock.now = 31.0
        # A new server's first event wakes the writer, which finds gpu0's window over.
        fold.admit(K.LOOP_ABORTED, "gpu1", loop(2), "supervisor", 31.0)
        with anyio.fail_after(10):
            while not rows:
                await anyio.sleep(0.01)
        assert fold.pending() == 0
        await fold.close()
    # gpu0's summary when its window ended; gpu1's lone loop was written at once (by the
    # dispatcher, not here) and its empty window closed at the stop.
    assert [(k, s, actor, at) for k, s, _, actor, at in rows] == \
        [(K.LOOP_ABORTED, "gpu0", "supervisor", 31.0)]
    assert rows[0][2]["count"] == 1 and rows[0][2]["samples"][0]["prompt"] == "p1"
