"""The queue ahead (dispatch.queue_ahead) against the over-commit flag and the saturation
guard, poll by poll: SGLang's figures with our own queue ahead in them are no sign, read net
of it (queue_ahead.py); a server that really runs fewer than its slots is still caught; and
the in-flight limit lets the queue ahead through on top of whatever the guard sets."""

from __future__ import annotations

import anyio
import pytest

from supervisor.servers.inflight_limit import InFlightLimit
from supervisor.servers.overcommit import Observation, OvercommitDetector
from supervisor.servers.queue_ahead import net_of_queue_ahead
from supervisor.servers.saturation_guard import GuardPolicy, GuardPoll, SaturationGuard
from supervisor.servers.sglang_monitor import SglangMonitor
from supervisor.servers.sglang_view import SglangView

SLOTS, AHEAD = 32, 4


def flag_after(polls: list[tuple[int, int, int]], ahead: int) -> bool:
    """The over-commit flag after polls of (running, queued, our in flight)."""
    detector = OvercommitDetector()
    for i, (running, queued, in_flight) in enumerate(polls):
        net = net_of_queue_ahead(in_flight, queued, ahead)
        detector.observe(Observation(at=float(i), running=running, queued=net.queued,
                                     retractions_total=0.0, in_flight=net.in_flight))
    return detector.overcommitted


def test_every_slot_running_and_our_queue_ahead_waiting_is_no_sign() -> None:
    # SGLang's queue holds our 4 (3 between a completion and its replacement) for ten polls.
    polls = [(SLOTS, AHEAD - i % 2, SLOTS + AHEAD - i % 2) for i in range(10)]
    assert not flag_after(polls, AHEAD)
    # The same figures read raw are the queue sign: the guard would cut a healthy server.
    assert flag_after(polls, 0)


def test_a_server_running_fewer_than_its_slots_is_still_flagged_net_of_the_queue_ahead() -> None:
    # Its KV pool admits 24 of the 32: 8 of ours wait besides the queue ahead, as they
    # waited (8) without one.
    polls = [(24, 8 + AHEAD, SLOTS + AHEAD)] * 5
    assert flag_after(polls, AHEAD)
    assert flag_after([(24, 8, SLOTS)] * 5, 0)


class Monitor:
    """A poll a second, as sglang_monitor.py and saturation_watch.py make them: the
    over-commit flag, then the guard, on SGLang's figures net of the queue ahead (raw, with
    `net_of` False). Our in flight is always the limit and the queue ahead."""

    def __init__(self, net_of: bool = True) -> None:
        self.detector = OvercommitDetector()
        self.guard = SaturationGuard(SLOTS, GuardPolicy(calm_s=5.0, settle_s=2.0))
        self.ahead = AHEAD if net_of else 0
        self.t = 0.0
        self.retractions = 0.0

    def polls(self, runs_at_most: int, seconds: int, *, retracting: bool = False) -> list[int]:
        limits = []
        for _ in range(seconds):
            in_flight = self.guard.limit + AHEAD
            running = min(runs_at_most, in_flight)
            if retracting:
                self.retractions += 5.0
            net = net_of_queue_ahead(in_flight, in_flight - running, self.ahead)
            self.detector.observe(Observation(
                at=self.t, running=running, queued=net.queued,
                retractions_total=self.retractions, in_flight=net.in_flight))
            self.guard.observe(GuardPoll(
                at=self.t, overcommitted=self.detector.overcommitted,
                overcommit_reason=self.detector.reason, running=running,
                gen_throughput=600.0 * running, in_flight=net.in_flight, queued=net.queued,
                token_usage=0.95 if retracting else 0.3,
                retracting=self.detector.retracting))
            limits.append(self.guard.limit)
            self.t += 1.0
        return limits


def test_the_guard_keeps_its_max_with_every_slot_running_and_the_queue_ahead_waiting() -> None:
    m = Monitor()
    assert m.polls(SLOTS, 60) == [SLOTS] * 60
    assert m.guard.reason is None and not m.detector.overcommitted


def test_after_a_cut_the_guard_climbs_back_with_the_queue_ahead_waiting() -> None:
    for net_of in (True, False):
        m = Monitor(net_of)
        cut = m.polls(SLOTS, 10, retracting=True)       # its KV pool filled: cut
        assert min(cut) < SLOTS, cut
        # The pool has room again and SGLang runs every request we ask it to run.
        back = m.polls(SLOTS, 120)
        if net_of:
            assert back[-1] == SLOTS, back
            assert not m.detector.overcommitted
        else:
            # Read raw, our queue ahead is requests above the limit still to drain: the cut
            # never counts as drained, and the limit is never raised again.
            assert back[-1] < SLOTS and not m.guard.drained, back


def test_the_guard_still_cuts_to_what_sglang_runs_net_of_the_queue_ahead() -> None:
    m = Monitor()
    limits = m.polls(24, 30)
    # To the 24 it runs (not to 24 less the queue ahead), and held there.
    assert limits[-1] == 24 and min(limits) == 24, limits


async def test_the_limit_lets_the_queue_ahead_through_on_top_of_a_lowered_limit() -> None:
    limit = InFlightLimit(8, ahead=2)
    assert limit.capacity == 10
    limit.set(4, "a cut")
    assert (limit.limit, limit.capacity) == (4, 6)
    entered = 0

    async def hold(done: anyio.Event) -> None:
        nonlocal entered
        async with limit.slot():
            entered += 1
            await done.wait()

    done = anyio.Event()
    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(hold, done)
        for _ in range(100):           # bounded: the six free slots fill within a few steps
            await anyio.sleep(0)
        assert entered == 6 and limit.held == 6
        limit.set(8)                   # raised: two more at once, the queue ahead kept
        for _ in range(100):
            await anyio.sleep(0)
        assert entered == 8
        done.set()
    assert limit.held == 0


def test_a_negative_queue_ahead_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="ahead must be at least 0, got -1"):
        InFlightLimit(8, ahead=-1)


def test_only_a_queue_beyond_ours_makes_a_stall_a_free_wait() -> None:
    # request_path.py requeues a stalled request without an attempt while SGLang "queues":
    # our own queue ahead must not make every stall on a stuck server free.
    monitor = SglangMonitor("gpu0", ahead=lambda: AHEAD)
    monitor.view = SglangView(polled=True, running=SLOTS, queued=AHEAD)
    assert not monitor.queueing
    monitor.view = SglangView(polled=True, running=SLOTS, queued=AHEAD + 1)
    assert monitor.queueing
    assert SglangMonitor("gpu0").queueing is False
