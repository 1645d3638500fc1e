"""The saturation guard's policy (supervisor/servers/saturation_guard.py) on poll sequences:
when it lowers a server's in-flight limit, by how much, and how carefully it raises it."""

from __future__ import annotations

import pytest

from supervisor.servers.saturation_guard import (GuardPolicy, GuardPoll, LimitChange,
                                                 SaturationGuard, step_of)

POLICY = GuardPolicy(floor=4, calm_s=10.0, settle_s=5.0, collapse_ratio=0.5, collapse_polls=3,
                     peak_window_s=60.0)


def poll(at: float, *, over: bool = False, running: int | None = None,
         tput: float | None = None, in_flight: int = 32, figures: bool = True) -> GuardPoll:
    return GuardPoll(at=at, overcommitted=over,
                     overcommit_reason="queue held over 3 polls" if over else None,
                     running=running, gen_throughput=tput, in_flight=in_flight,
                     figures=figures)


def run(guard: SaturationGuard, polls: list[GuardPoll]) -> list[LimitChange]:
    return [c for p in polls if (c := guard.observe(p)) is not None]


def test_a_step_is_an_eighth_of_the_max_and_at_least_one():
    assert [step_of(n) for n in (1, 7, 8, 24, 64)] == [1, 1, 1, 3, 8]


def test_over_commit_lowers_to_what_sglang_runs():
    g = SaturationGuard(32, POLICY)
    [change] = run(g, [poll(0.0), poll(1.0, over=True, running=20)])
    assert (change.old, change.new, change.lowered) == (32, 20, True)
    assert "queue held" in change.reason and "to the 20 SGLang runs" in change.reason
    assert g.limit == 20 and g.reason is not None


def test_without_a_running_count_it_lowers_by_one_step():
    g = SaturationGuard(32, POLICY)
    [change] = run(g, [poll(0.0, over=True)])
    assert (change.old, change.new) == (32, 28) and "by a step of 4" in change.reason


def test_never_more_than_half_at_once_nor_below_the_floor():
    g = SaturationGuard(32, POLICY)
    changes = run(g, [poll(t, over=True, running=1) for t in range(0, 60, 6)])
    assert [(c.old, c.new) for c in changes] == [(32, 16), (16, 8), (8, 4)]
    assert g.limit == 4


def test_a_floor_above_the_max_is_the_max():
    g = SaturationGuard(2, GuardPolicy(floor=4, calm_s=1.0, settle_s=1.0))
    assert run(g, [poll(0.0, over=True, running=1)]) == [] and g.limit == 2


def test_cuts_wait_for_the_last_one_to_settle():
    g = SaturationGuard(32, POLICY)
    changes = run(g, [poll(t, over=True) for t in (0.0, 1.0, 2.0, 4.9, 5.0, 6.0)])
    assert [(c.old, c.new) for c in changes] == [(32, 28), (28, 24)]


def test_raised_back_one_step_per_calm_interval_up_to_the_max():
    g = SaturationGuard(32, POLICY)
    run(g, [poll(0.0, over=True, running=20)])
    # Calm from 1 s: nothing before 10 s of calm, then one step per 10 s.
    polls = [poll(float(t)) for t in range(1, 60)]
    changes = [(p.at, c) for p in polls if (c := g.observe(p)) is not None]
    assert [(at, c.old, c.new) for at, c in changes] == [(11.0, 20, 24), (21.0, 24, 28),
                                                         (31.0, 28, 32)]
    assert all("calm for" in c.reason for _, c in changes)
    assert g.limit == 32 and g.reason is None


def test_a_sign_during_the_calm_restarts_the_wait():
    g = SaturationGuard(32, POLICY)
    run(g, [poll(0.0, over=True, running=20)])
    # At 3 s the server queues again: too soon after the cut for another (settle_s 5), but
    # the calm starts over at 4 s, so the first step up waits until 14 s (not 11 s).
    polls = [poll(1.0), poll(2.0), poll(3.0, over=True)] + \
        [poll(float(t)) for t in range(4, 15)]
    changes = [(p.at, c) for p in polls if (c := g.observe(p)) is not None]
    assert [(at, c.old, c.new) for at, c in changes] == [(14.0, 20, 24)]


def test_a_failed_scrape_is_no_evidence_either_way():
    g = SaturationGuard(32, POLICY)
    run(g, [poll(0.0, over=True, running=20)])
    assert run(g, [poll(float(t), figures=False, over=True) for t in range(1, 40)]) == []
    assert g.limit == 20


def test_a_throughput_collapse_while_as_busy_lowers_the_limit():
    g = SaturationGuard(32, POLICY)
    steady = [poll(float(t), tput=3000.0, in_flight=32) for t in range(5)]
    collapse = [poll(float(t), tput=1200.0, in_flight=32) for t in range(5, 8)]
    changes = run(g, steady + collapse)
    assert len(changes) == 1 and changes[0].new == 28
    assert "collapsed to 1200 tok/s, 40% of its recent peak 3000" in changes[0].reason


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
    run(g, [poll(0.0, tput=3000.0), poll(1.0, over=True, running=16)])
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
    assert [c.new for c in run(g, [poll(40.0, over=True, running=24)])] == [24]
    ups = run(g, [poll(float(t), tput=24 * 37.5, in_flight=24) for t in range(41, 70)])
    assert [c.new for c in ups] == [28, 32]


def test_a_smaller_batch_is_not_read_as_a_lasting_collapse():
    # After the cut fewer requests make less in total, but each as fast as at the peak.
    g = SaturationGuard(32, POLICY)
    _collapsed_to_28(g)
    assert [c.new for c in run(g, [poll(float(t), tput=28 * 100.0, in_flight=28)
                                   for t in range(8, 30)])] == [32]


@pytest.mark.parametrize("kwargs, message", [
    ({"floor": 0}, "floor must be at least 1"),
    ({"calm_s": 0}, "calm_s must be above 0"),
    ({"collapse_ratio": 1.0}, "collapse_ratio must be within"),
    ({"collapse_polls": 0}, "collapse_polls must be at least 1"),
])
def test_bad_policy_values_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GuardPolicy(**kwargs)
