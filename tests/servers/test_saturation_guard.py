"""The saturation guard's policy (supervisor/servers/saturation_guard.py) on poll sequences:
when it lowers a server's in-flight limit, by how much, and how carefully it raises it.

The figures of the spiral below are SGLang 0.5.23's on a 4096-token KV pool (the CPU server,
../shared/tools/sglang-cpu) at 12 allowed and 700 max tokens: it ran 7 and queued 5 with
its pool 28-32% used -- its scheduler admits by reserved tokens, not used ones
(sglang/srt/managers/schedule_policy.py PrefillAdder, rem_total_tokens)."""

from __future__ import annotations

import pytest

from supervisor.servers.saturation_guard import (
    GuardPolicy,
    GuardPoll,
    LimitChange,
    SaturationGuard,
    step_of,
)

POLICY = GuardPolicy(floor=4, calm_s=10.0, settle_s=5.0, collapse_ratio=0.5, collapse_polls=3,
                     peak_window_s=60.0)


def poll(at: float, *, over: bool = False, running: int | None = None,
         tput: float | None = None, in_flight: int = 32, figures: bool = True,
         queued: int | None = None, usage: float | None = None,
         retracting: bool = False) -> GuardPoll:
    if over and queued is None and running is not None and not retracting:
        queued = max(0, in_flight - running)       # what SGLang holds back of ours
    return GuardPoll(at=at, overcommitted=over,
                     overcommit_reason=("retracting 20 requests/min" if retracting else
                                        "queue held over 3 polls") if over else None,
                     running=running, gen_throughput=tput, in_flight=in_flight,
                     figures=figures, queued=queued, token_usage=usage, retracting=retracting)


# A KV pool at 95%: SGLang queues for want of room, so a cut needs no held queue.
FULL = 0.95


def held_queue(t0: float, running: int, in_flight: int, usage: float = 0.3,
               tput: float | None = None) -> list[GuardPoll]:
    """SGLang queues what it does not run, the same queue for settle_s (5 s) and one poll."""
    return [poll(t0 + t, over=True, running=running, in_flight=in_flight, usage=usage,
                 tput=tput) for t in range(6)]


def run(guard: SaturationGuard, polls: list[GuardPoll]) -> list[LimitChange]:
    return [c for p in polls if (c := guard.observe(p)) is not None]


def test_a_step_is_an_eighth_of_the_max_and_at_least_one():
    assert [step_of(n) for n in (1, 7, 8, 24, 64)] == [1, 1, 1, 3, 8]


def test_over_commit_lowers_to_what_sglang_runs_once_its_queue_has_held():
    g = SaturationGuard(32, POLICY)
    # Queued for under settle_s (5 s): no cut yet; at 5 s of the same queue, to 20.
    assert run(g, [poll(0.0), *held_queue(1.0, 20, 32)[:5]]) == []
    [change] = run(g, [poll(6.0, over=True, running=20, usage=0.3)])
    assert (change.old, change.new, change.lowered) == (32, 20, True)
    assert "queue held" in change.reason and "to the 20 SGLang runs" in change.reason
    assert g.limit == 20 and g.reason is not None


def test_without_a_running_count_it_lowers_by_one_step():
    g = SaturationGuard(32, POLICY)
    [change] = run(g, [poll(0.0, over=True)])
    assert (change.old, change.new) == (32, 28) and "by a step of 4" in change.reason
    assert not g.drained          # 32 still in flight above the new limit


def test_never_more_than_half_at_once_nor_below_the_floor():
    g = SaturationGuard(32, POLICY)
    # Each poll finds our in-flight count drained to the limit the last cut left.
    polls, limit = [], 32
    for t in range(0, 60, 6):
        polls.append(poll(float(t), over=True, running=1, in_flight=limit, usage=FULL))
        limit = max(4, limit // 2)
    changes = run(g, polls)
    assert [(c.old, c.new) for c in changes] == [(32, 16), (16, 8), (8, 4)]
    assert g.limit == 4


def test_a_floor_above_the_max_is_the_max():
    g = SaturationGuard(2, GuardPolicy(floor=4, calm_s=1.0, settle_s=1.0))
    assert run(g, [poll(0.0, over=True, running=1, usage=FULL)]) == [] and g.limit == 2


def test_cuts_wait_for_the_last_one_to_drain_then_settle():
    g = SaturationGuard(32, POLICY)
    # Retracting (a full KV pool) all along. After the cut to 28, 32 are still in flight
    # until 3 s: no second cut however long that takes; drained at 3 s, the next cut waits
    # settle_s (5 s) from there, not from the cut.
    polls = [poll(0.0, over=True, retracting=True)]
    polls += [poll(t, over=True, retracting=True, in_flight=32) for t in (1.0, 2.0, 2.9)]
    polls += [poll(t, over=True, retracting=True, in_flight=28) for t in (3.0, 5.0, 7.9)]
    polls += [poll(8.0, over=True, retracting=True, in_flight=28)]
    changes = run(g, polls)
    assert [(c.old, c.new) for c in changes] == [(32, 28), (28, 24)]
    # Each says what allowed a cut below the queue's running count.
    assert all("SGLang is retracting" in c.reason for c in changes), changes
    # The gauge at kv_full says so with its figure.
    g = SaturationGuard(32, POLICY)
    [change] = run(g, [poll(0.0, over=True, running=None, usage=FULL)])
    assert f"KV pool full: {FULL:.0%}" in change.reason, change


def test_raised_back_one_step_per_calm_interval_up_to_the_max():
    g = SaturationGuard(32, POLICY)
    run(g, [poll(0.0, over=True, running=20, usage=FULL)])
    # Calm from 1 s: nothing before 10 s of calm, then one step per 10 s.
    polls = [poll(float(t), in_flight=20) for t in range(1, 60)]
    changes = [(p.at, c) for p in polls if (c := g.observe(p)) is not None]
    assert [(at, c.old, c.new) for at, c in changes] == [(11.0, 20, 24), (21.0, 24, 28),
                                                         (31.0, 28, 32)]
    assert all("calm for" in c.reason for _, c in changes)
    assert g.limit == 32 and g.reason is None


def test_a_sign_during_the_calm_restarts_the_wait():
    g = SaturationGuard(32, POLICY)
    run(g, [poll(0.0, over=True, running=20, usage=FULL)])
    # At 3 s the server queues again: too soon after the cut for another (settle_s 5), but
    # the calm starts over at 4 s, so the first step up waits until 14 s (not 11 s).
    polls = [poll(1.0, in_flight=20), poll(2.0, in_flight=20),
             poll(3.0, over=True, in_flight=20)] + \
        [poll(float(t), in_flight=20) for t in range(4, 15)]
    changes = [(p.at, c) for p in polls if (c := g.observe(p)) is not None]
    assert [(at, c.old, c.new) for at, c in changes] == [(14.0, 20, 24)]


def test_a_failed_scrape_is_no_evidence_either_way():
    g = SaturationGuard(32, POLICY)
    run(g, [poll(0.0, over=True, running=20, usage=FULL)])
    assert run(g, [poll(float(t), figures=False, over=True) for t in range(1, 40)]) == []
    assert g.limit == 20


def test_a_throughput_collapse_while_as_busy_lowers_the_limit():
    g = SaturationGuard(32, POLICY)
    steady = [poll(float(t), tput=3000.0, in_flight=32) for t in range(5)]
    collapse = [poll(float(t), tput=1200.0, in_flight=32) for t in range(5, 8)]
    changes = run(g, steady + collapse)
    assert len(changes) == 1 and changes[0].new == 28
    assert ("collapsed to 1200 tok/s over 32 requests in flight, 37.5 tok/s each: 40% of its "
            "recent peak 93.8 tok/s each (3000 tok/s over 32)") in changes[0].reason


def test_a_job_winding_down_is_not_a_collapse():
    g = SaturationGuard(32, POLICY)
    steady = [poll(float(t), tput=3000.0, in_flight=32) for t in range(5)]
    quiet = [poll(float(t), tput=300.0, in_flight=3) for t in range(5, 30)]
    assert run(g, steady + quiet) == [] and g.limit == 32


def test_two_slow_polls_are_not_a_collapse_and_an_old_peak_is_forgotten():
    g = SaturationGuard(32, POLICY)
    polls = [poll(0.0, tput=3000.0), poll(1.0, tput=1000.0), poll(2.0, tput=1000.0),
             poll(3.0, tput=3000.0)]
    # Past the peak window the old peak no longer counts: 1000 tok/s is the norm now.
    polls += [poll(float(t), tput=1000.0) for t in range(70, 80)]
    assert run(g, polls) == []


def test_the_peak_is_relearnt_after_a_cut():
    g = SaturationGuard(32, POLICY)
    run(g, [poll(0.0, tput=3000.0), poll(1.0, over=True, running=16, usage=FULL)])
    # At 16 in flight the server makes 1400 tok/s: below half the old peak, and no collapse.
    assert run(g, [poll(float(t), tput=1400.0, in_flight=16) for t in range(2, 8)]) == []


def _collapsed_to_28(g: SaturationGuard) -> None:
    steady = [poll(float(t), tput=3200.0, in_flight=32) for t in range(5)]   # 100 tok/s each
    collapse = [poll(float(t), tput=400.0, in_flight=32) for t in range(5, 8)]
    assert [c.new for c in run(g, steady + collapse)] == [28]


def test_a_collapse_that_lasts_holds_the_limit_without_cutting_deeper():
    g = SaturationGuard(32, POLICY)
    _collapsed_to_28(g)
    # Each request still at 12.5 tok/s, an eighth of its speed at the peak: long past calm_s
    # and settle_s, neither a step up nor a deeper cut.
    assert run(g, [poll(float(t), tput=28 * 12.5, in_flight=28) for t in range(8, 60)]) == []
    assert g.limit == 28 and g.reason is not None and "collapsed" in g.reason


def test_a_recovered_collapse_is_raised_back_to_the_max_then_forgotten():
    g = SaturationGuard(32, POLICY)
    _collapsed_to_28(g)
    # Back to 90 tok/s a request at 28 in flight: over half the peak's 100, so calm.
    ups = run(g, [poll(float(t), tput=28 * 90.0, in_flight=28) for t in range(8, 40)])
    assert [c.new for c in ups] == [32] and g.reason is None
    # At the max the old reference is gone: after a later cut for another reason, a slower
    # pace per request (37.5 tok/s, under half the old peak's) is calm and climbs back.
    assert [c.new for c in run(g, [poll(40.0, over=True, running=24, usage=FULL)])] == [24]
    ups = run(g, [poll(float(t), tput=24 * 37.5, in_flight=24) for t in range(41, 70)])
    assert [c.new for c in ups] == [28, 32]


def test_a_smaller_batch_is_not_read_as_a_lasting_collapse():
    # After the cut fewer requests make less in total, but each as fast as at the peak.
    g = SaturationGuard(32, POLICY)
    _collapsed_to_28(g)
    assert [c.new for c in run(g, [poll(float(t), tput=28 * 100.0, in_flight=28)
                                   for t in range(8, 30)])] == [32]


def test_sglang_running_7_of_12_with_room_settles_at_7_then_8_never_spirals():
    """The spiral seen on real SGLang: 12 allowed, 7 run, 5 queued, KV 30% used."""
    g = SaturationGuard(12, POLICY)
    moves: list[tuple[float, int, int]] = []

    def feed(polls: list[GuardPoll]) -> None:
        moves.extend((p.at, c.old, c.new) for p in polls if (c := g.observe(p)) is not None)

    feed(held_queue(-5.0, 7, 12, tput=131.0))
    assert moves == [(0.0, 12, 7)] and not g.drained
    # The 12 sent before the cut drain slowly (long answers); the flag stays on meanwhile
    # and SGLang still runs 7: no judging 7 before our count is down to it.
    feed([poll(float(t), over=True, running=7, in_flight=12 - t // 4, usage=0.31, tput=45.0)
          for t in range(1, 21)])
    assert moves == [(0.0, 12, 7)] and g.drained
    # Drained: 7 in flight, 7 running, nothing queued, the flag lingering a few polls
    # (overcommit.py clear_polls), throughput lower than at 12 (43 tok/s, a third of the
    # peak at 12): neither the flag nor the lower total is a reason to cut.
    feed([poll(float(t), over=t < 24, running=7, in_flight=7, queued=0, usage=0.29,
               tput=43.0) for t in range(21, 31)])
    assert moves == [(0.0, 12, 7)] and g.limit == 7
    # Calm: one step up (a step of 1 for 12), where SGLang runs 7 and queues 1 of ours, for
    # minutes: settled at 8, no climb past what it admits, and no cut below what it runs.
    for t in range(31, 400):
        feed([poll(float(t), running=7, in_flight=g.limit, queued=g.limit - 7, usage=0.32,
                   tput=43.0)])
    assert moves == [(0.0, 12, 7), (34.0, 7, 8)] and g.limit == 8


def test_a_shrinking_queue_is_sglang_still_admitting_not_a_cut():
    """The real CPU server's start (SGLang 0.5.23, 12 sent at once): it prefills a few at a
    time, running 1, 4, 5, 6, 7 while its queue goes 7, 6, 4, 3, 1 over 16 s, KV under 25%.
    The old guard cut 12 -> 6 there on the first three polls of 6 waiting."""
    g = SaturationGuard(12, POLICY)
    ramp = [(1, 7), (4, 6), (4, 6), (4, 6), (5, 5), (5, 4), (6, 4), (6, 4), (5, 3), (5, 3),
            (5, 2), (7, 1), (7, 1), (7, 1)]
    polls = [poll(float(t), over=q >= 2, running=r, queued=q, in_flight=12, usage=0.2)
             for t, (r, q) in enumerate(ramp)]
    assert run(g, polls) == [] and g.limit == 12


def test_a_slow_start_that_keeps_admitting_is_cut_only_once_it_stops():
    """The CPU server on a loaded machine: prefilling a burst, it runs 1 with 7 waiting for
    4 s, then 3, then 5 -- each step admitted more, so each restarts the wait; at 7
    running and 5 waiting for settle_s it admits no more, and the cut is to those 7.
    The old guard cut 12 -> 6 on the first held queue ("to the 1 SGLang runs", halved)."""
    g = SaturationGuard(12, POLICY)
    polls, t = [], 0.0
    for running, queued in ((1, 7), (3, 6), (5, 5)):
        for _ in range(4):
            polls.append(poll(t, over=True, running=running, queued=queued, in_flight=12,
                              usage=0.1))
            t += 1.0
    assert run(g, polls) == [] and g.limit == 12
    held = [poll(t + k, over=True, running=7, queued=5, in_flight=12, usage=0.2)
            for k in range(7)]
    changes = run(g, held)
    assert [(c.old, c.new) for c in changes] == [(12, 7)]
    assert "to the 7 SGLang runs" in changes[0].reason


def test_sglang_running_more_than_a_queue_cut_left_raises_it_to_that():
    """The real CPU server on a loaded machine: a queue held at 6 running, cut to 6; while
    the 12 sent before drain, SGLang admits a 7th with its pool half empty. The limit
    follows it to 7 at once: never below what SGLang runs while its pool has room."""
    g = SaturationGuard(12, POLICY)
    run(g, held_queue(-5.0, 6, 12, usage=0.19))
    assert g.limit == 6
    changes = run(g, [poll(1.0, running=6, in_flight=11, usage=0.3),
                      poll(2.0, running=7, in_flight=10, usage=0.49)])
    assert [(c.old, c.new) for c in changes] == [(6, 7)]
    assert "SGLang runs 7 of ours with its KV pool 49% full" in changes[0].reason
    # After a cut for a full pool the excess still running is not followed.
    full = SaturationGuard(12, POLICY)
    run(full, [poll(0.0, over=True, running=12, retracting=True, usage=0.95)])
    assert full.limit == 11
    assert run(full, [poll(1.0, running=12, in_flight=12, usage=0.5)]) == []


def test_a_second_cut_counts_the_queue_from_the_drain():
    """After a cut to 20 the 32 sent before drain slowly, SGLang's queue shrinking with
    them; drained, it still runs 16 and queues 4 of our 20: held settle_s from the drain,
    that queue is cut for, however large the queue was while draining."""
    g = SaturationGuard(32, POLICY)
    run(g, held_queue(-5.0, 20, 32))
    assert g.limit == 20
    draining = [poll(float(t), over=True, running=20, in_flight=32 - t, usage=0.3)
                for t in range(1, 13)]
    assert run(g, draining) == [] and g.drained
    held = [poll(float(t), over=True, running=16, in_flight=20, usage=0.3)
            for t in range(13, 25)]
    changes = run(g, held)
    assert [(c.old, c.new) for c in changes] == [(20, 16)], changes
    assert "to the 16 SGLang runs" in changes[0].reason


def test_never_below_what_sglang_runs_while_its_kv_pool_has_room():
    g = SaturationGuard(32, POLICY)
    run(g, held_queue(-5.0, 20, 32, usage=0.5))
    assert g.limit == 20
    # Drained to 20, SGLang runs all 20 and queues nobody of ours, flag on: no cut, however
    # long the flag stays on.
    assert run(g, [poll(float(t), over=True, running=20, in_flight=20, queued=0, usage=0.5)
                   for t in range(1, 60)]) == []
    assert g.limit == 20


def test_a_full_kv_pool_cuts_below_what_sglang_runs():
    g = SaturationGuard(32, POLICY)
    run(g, [poll(0.0, over=True, running=20, usage=0.95)])
    # At 20 of 20, the gauge at 95%: the pool, not our count, is the limit: a step down.
    changes = run(g, [poll(float(t), over=True, running=20, in_flight=20, queued=0,
                           usage=0.95) for t in range(1, 8)])
    assert [(c.old, c.new) for c in changes] == [(20, 16)]
    assert "by a step of 4" in changes[0].reason


def test_a_retraction_cuts_below_what_sglang_runs_whatever_the_usage_gauge():
    # The gauge is read after the retraction freed the pool: a retraction is a full pool.
    g = SaturationGuard(32, POLICY)
    [change] = run(g, [poll(0.0, over=True, running=32, retracting=True, usage=0.4)])
    assert (change.old, change.new) == (32, 28)


def test_its_own_cut_is_not_read_as_a_collapse():
    """The real run's second cut: 131 tok/s read while the 12 sent before the cut drained
    (SGLang's gauge covers its last 40 decode steps, `decode_log_interval`: seconds stale
    on a slow server), then 43 tok/s at 7. The old guard learnt its peak from the draining
    polls and cut 7 -> 6 for a "collapse"."""
    g = SaturationGuard(12, POLICY)
    run(g, [poll(float(t), running=12, in_flight=12, tput=131.0) for t in range(5)])
    run(g, held_queue(0.0, 7, 12, tput=131.0))
    assert g.limit == 7
    draining = [poll(float(t), running=7, in_flight=12 - (t - 5) // 2, usage=0.3, tput=131.0)
                for t in range(6, 16)]
    steady = [poll(float(t), running=7, in_flight=7, queued=0, usage=0.3, tput=43.0)
              for t in range(16, 30)]
    assert [(c.old, c.new) for c in run(g, draining + steady)] == [(7, 8)]   # calm: up


def test_a_jumpy_running_gauge_is_no_collapse():
    """SGLang's running gauge is read at another instant than its throughput: with short
    requests it says 1 one poll and 8 the next. Per request in flight, the speed is steady."""
    g = SaturationGuard(8, POLICY)
    polls = [poll(float(t), running=(1, 8, 2, 8)[t % 4], in_flight=8, tput=12000.0 + 500 * (t % 3))
             for t in range(60)]
    assert run(g, polls) == [] and g.limit == 8


def test_a_collapse_judged_while_draining_waits_for_the_drain():
    g = SaturationGuard(32, POLICY)
    # Cut for a queue to 16 while 32 are in flight: the speed while the 32 drain is not the
    # speed at 16, so no peak is learnt from it and nothing is judged a collapse.
    run(g, held_queue(-5.0, 16, 32))
    assert g.limit == 16
    draining = [poll(float(t), running=16, in_flight=32 - t, tput=4000.0 - 200 * t)
                for t in range(1, 16)]
    assert run(g, draining) == [] and g.limit == 16


@pytest.mark.parametrize("kwargs, message", [
    ({"floor": 0}, "floor must be at least 1"),
    ({"calm_s": 0}, "calm_s must be above 0"),
    ({"collapse_ratio": 1.0}, "collapse_ratio must be within"),
    ({"collapse_polls": 0}, "collapse_polls must be at least 1"),
    ({"kv_full": 0}, "kv_full must be within"),
])
def test_bad_policy_values_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GuardPolicy(**kwargs)


def test_a_cut_held_at_half_says_the_limit_it_set():
    """CI's real CPU server: 12 allowed, SGLang ran 5 with 7 of ours waiting and its pool
    17% full. A cut at most halves the limit, so it went to 6, and its words say 6 and why,
    not "to the 5 SGLang runs" beside a limit of 6."""
    g = SaturationGuard(12, POLICY)
    held = [poll(float(k), over=True, running=5, queued=7, in_flight=12, usage=0.17)
            for k in range(12)]
    changes = run(g, held)
    assert [(c.old, c.new) for c in changes] == [(12, 6)]
    assert "to 6, half of 12" in changes[0].reason
    assert "aimed to the 5 SGLang runs" in changes[0].reason
