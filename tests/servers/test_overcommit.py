"""The over-commit flag on sequences of polls: a queue that holds or grows while SGLang runs
fewer than we send, retractions over the threshold, clearing only after clean polls, and no
verdict from polls without figures."""

from __future__ import annotations

import pytest

from supervisor.servers.overcommit import (
    Observation,
    OvercommitChange,
    OvercommitDetector,
    OvercommitPolicy,
)

POLICY = OvercommitPolicy(queue_polls=3, retraction_polls=4, retractions_per_min=10.0,
                          clear_polls=2)


def run(polls: list[tuple[int | None, int | None, float | None, int]],
        policy: OvercommitPolicy = POLICY, step_s: float = 5.0
        ) -> tuple[OvercommitDetector, list[tuple[int, OvercommitChange]]]:
    """Feed (running, queued, retractions_total, in_flight) polls `step_s` apart; the
    changes with the index of the poll that made them."""
    d = OvercommitDetector(policy)
    changes = []
    for i, (running, queued, retracted, in_flight) in enumerate(polls):
        change = d.observe(Observation(i * step_s, running, queued, retracted, in_flight))
        if change is not None:
            changes.append((i, change))
    return d, changes


def test_growing_queue_below_our_in_flight_turns_on_after_the_window() -> None:
    d, changes = run([(60, 4, 0.0, 64), (58, 6, 0.0, 64), (55, 9, 0.0, 64)])
    assert [(i, c.on) for i, c in changes] == [(2, True)]
    assert "queue grew over 3 polls (4 -> 9 waiting)" in changes[0][1].reason
    assert "running 55 of our 64 in flight" in changes[0][1].reason
    assert d.overcommitted and d.reason == changes[0][1].reason


def test_a_queue_that_holds_is_over_commit_too() -> None:
    """Our in-flight is capped, so the queue rises to in-flight - running and stays."""
    _, changes = run([(54, 10, None, 64)] * 3)
    assert [(i, c.on) for i, c in changes] == [(2, True)]
    assert "queue held" in changes[0][1].reason


@pytest.mark.parametrize("polls", [
    [(60, 4, 0.0, 64), (58, 6, 0.0, 64), (62, 2, 0.0, 64)],   # shrinking: being absorbed
    [(60, 4, 0.0, 64), (64, 0, 0.0, 64), (60, 4, 0.0, 64)],   # a queue that comes and goes
    [(64, 5, 0.0, 64), (64, 6, 0.0, 64), (64, 8, 0.0, 64)],   # running all we send: not ours
    [(63, 1, 0.0, 64), (63, 1, 0.0, 64), (63, 1, 0.0, 64)],   # a replacement between steps
    [(60, 4, 0.0, 64), (58, 6, 0.0, 64)],                     # not enough polls yet
])
def test_no_flag_without_a_lasting_queue_of_ours(polls: list) -> None:
    d, changes = run(polls)
    assert changes == [] and not d.overcommitted


def test_retractions_over_the_threshold_turn_on() -> None:
    # 5 polls 5 s apart = 20 s; 12 retracted in that time = 36/min.
    polls = [(64, 0, float(n), 64) for n in (100, 103, 106, 109, 112)]
    d, changes = run(polls)
    assert [(i, c.on) for i, c in changes] == [(4, True)]
    assert "retracting 36.0 requests/min over the last 4 polls (over 10/min)" \
        == changes[0][1].reason
    assert d.retraction_rate_per_min() == pytest.approx(36.0)


def test_one_burst_of_retractions_is_not_a_trend() -> None:
    # 3 retracted once in 20 s = 9/min: under 10.
    polls = [(64, 0, n, 64) for n in (0.0, 0.0, 3.0, 3.0, 3.0, 3.0)]
    d, changes = run(polls)
    assert changes == [] and not d.overcommitted


def test_a_counter_that_goes_back_starts_a_new_history() -> None:
    """A lower total is a new SGLang process: no negative rate, no rate across the two."""
    polls = [(64, 0, n, 64) for n in (500.0, 520.0, 540.0, 2.0, 2.0, 2.0)]
    d, changes = run(polls)
    assert changes == []
    assert d.retraction_rate_per_min() == 0.0


def test_clears_only_after_clean_polls_and_says_so_once() -> None:
    policy = OvercommitPolicy(queue_polls=1, retraction_polls=4, clear_polls=2)
    polls = ([(54, 10, None, 64)]             # on
             + [(64, 0, None, 64)]            # one clean poll: still on (clear_polls=2)
             + [(54, 10, None, 64)]           # a sign again: the count starts over
             + [(64, 0, None, 64)] * 2)       # two clean polls: off
    d, changes = run(polls, policy)
    assert [(i, c.on) for i, c in changes] == [(0, True), (4, False)]
    assert "no queue held and under 10 retractions/min for 2 polls" == changes[1][1].reason
    assert not d.overcommitted and d.reason is None


def test_a_broken_queue_window_is_a_clean_poll() -> None:
    """A queue must last queue_polls polls in a row: an empty poll inside the window is
    clean, and enough clean polls clear the flag."""
    polls = [(54, 10, None, 64)] * 3 + [(64, 0, None, 64), (54, 10, None, 64)]
    _, changes = run(polls)
    assert [(i, c.on) for i, c in changes] == [(2, True), (4, False)]


def test_polls_without_figures_are_no_evidence() -> None:
    polls = ([(54, 10, None, 64)] * 3 + [(None, None, None, 64)] * 5)
    d, changes = run(polls)
    assert [(i, c.on) for i, c in changes] == [(2, True)]
    assert d.overcommitted


def test_a_poll_without_figures_does_not_break_the_queue_window() -> None:
    polls = [(54, 10, None, 64), (None, None, None, 64), (54, 11, None, 64),
             (54, 12, None, 64)]
    _, changes = run(polls)
    assert [(i, c.on) for i, c in changes] == [(3, True)]


def test_both_signs_are_named() -> None:
    polls = [(50, 14, float(n), 64) for n in (0, 10, 20, 30, 40)]
    d, changes = run(polls)
    assert changes[0][0] == 2 and "queue held" in changes[0][1].reason
    assert "queue held" in (d.reason or "") and "retracting 120.0 requests/min" in (d.reason or "")


@pytest.mark.parametrize("kwargs, problem", [
    ({"queue_polls": 0}, "queue_polls must be at least 1, got 0"),
    ({"min_queue": 0}, "min_queue must be at least 1, got 0"),
    ({"clear_polls": -1}, "clear_polls must be at least 1, got -1"),
    ({"retractions_per_min": 0}, "retractions_per_min must be above 0, got 0"),
])
def test_a_bad_policy_is_refused(kwargs: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        OvercommitPolicy(**kwargs)
