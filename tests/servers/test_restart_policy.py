from __future__ import annotations

import random

from supervisor.servers.restart_policy import LifeEnd, RestartPolicy

LONG = LifeEnd(answered=100, served=True)   # hours of serving, then a failure


def test_exponential_backoff_with_cap_and_jitter() -> None:
    p = RestartPolicy(initial_s=5, max_s=60, max_failures=10, window_s=1e6,
                      rng=random.Random(1), jitter=0.2)
    delays = [p.record_failure(float(t), LONG).delay_s for t in range(8)]
    bases = [5, 10, 20, 40, 60, 60, 60, 60]
    for d, b in zip(delays, bases):
        assert 0.8 * min(b, 60) <= d <= 60 and d <= 1.2 * b
    assert len(set(round(d, 6) for d in delays[:4])) == 4


def test_jitter_spreads_servers_that_failed_together() -> None:
    delays = {RestartPolicy(10, 300, 5, 100, rng=random.Random(seed)).record_failure(0).delay_s
              for seed in range(8)}
    assert len(delays) == 8 and all(8 <= d <= 12 for d in delays)


def test_more_than_max_failures_in_window_gives_up() -> None:
    p = RestartPolicy(1, 10, max_failures=2, window_s=100, rng=random.Random(0), jitter=0)
    assert [p.record_failure(t).give_up for t in (0, 1, 2)] == [False, False, True]
    p.reset()
    assert p.failures_in_window(3) == 0 and not p.record_failure(3).give_up


def test_old_failures_age_out_of_the_window() -> None:
    p = RestartPolicy(1, 100, max_failures=2, window_s=10, rng=random.Random(0), jitter=0)
    assert p.record_failure(0, LONG).delay_s == 1
    assert p.record_failure(1, LONG).delay_s == 2
    d = p.record_failure(20, LONG)  # the first two are outside the window now
    assert not d.give_up and d.failures_in_window == 1 and d.delay_s == 1


def test_lives_failing_in_a_row_before_answering_give_up_however_slow() -> None:
    # A hang found only hang_timeout_s (600 s) after each start never fills a 1,800 s
    # window with 5 failures; the lives that failed before answering still add up.
    p = RestartPolicy(5, 300, max_failures=5, window_s=1800, rng=random.Random(0), jitter=0,
                      max_unserved=4)
    decisions = [p.record_failure(700.0 * i) for i in range(1, 5)]
    assert [d.give_up for d in decisions] == [False, False, False, True]
    assert max(d.failures_in_window for d in decisions) <= 3
    assert decisions[-1].unserved_in_row == 4
    assert decisions[-1].reason == "4 lives in a row failed before answering"
    # The backoff grows with the loop, though the window holds few failures.
    assert [d.delay_s for d in decisions[:3]] == [5, 10, 20]
    p.reset()
    assert p.unserved_in_row == 0 and not p.record_failure(1e5).give_up


def test_a_life_that_answered_starts_the_unanswered_count_again() -> None:
    p = RestartPolicy(5, 300, max_failures=50, window_s=10, rng=random.Random(0), jitter=0,
                      max_unserved=3, max_brief=0)
    for i in range(20):
        # Two lives that answered nothing, then one that answered a few (ten seconds of
        # serving): it served, so never FAILED by this count.
        answered = 3 if i % 3 == 2 else 0
        d = p.record_failure(100.0 * i, LifeEnd(answered=answered))
        assert not d.give_up
        assert d.unserved_in_row == (0 if answered else i % 3 + 1)


def test_answering_for_ten_seconds_then_crashing_ends_failed_by_the_window() -> None:
    """The demo's crash drill: each life answers for 10 s, then crashes; the restarts come
    quickly. Not one life failed before answering, so the window's rule fires, and its
    words say what those lives answered."""
    p = RestartPolicy(0.5, 10, max_failures=5, window_s=120, rng=random.Random(0), jitter=0,
                      max_unserved=5, served_after_s=300)
    now, decisions = 0.0, []
    for _ in range(6):
        now += 12.0                      # loading, then ten seconds of answers
        d = p.record_failure(now, LifeEnd(answered=8, served=False))
        decisions.append(d)
        now += d.delay_s
    assert [d.give_up for d in decisions] == [False] * 5 + [True]
    last = decisions[-1]
    assert last.reason == "6 failures within 120 s, answering 48 between them"
    assert (last.unserved_in_row, last.brief_in_row, last.answered_in_window) == (0, 6, 48)


def test_lives_that_answer_a_little_and_fail_slowly_end_failed_as_brief_lives() -> None:
    # A scheduler that sticks once its first answers are out, its hang seen 600 s later:
    # the window never holds enough failures and each life answered, so only the
    # brief-lives count sees the loop; its words say what they answered.
    p = RestartPolicy(5, 300, max_failures=5, window_s=1800, rng=random.Random(0), jitter=0,
                      max_unserved=5, served_after_s=300, max_brief=4)
    decisions = [p.record_failure(700.0 * i, LifeEnd(answered=2)) for i in range(1, 5)]
    assert [d.give_up for d in decisions] == [False, False, False, True]
    assert decisions[-1].unserved_in_row == 0 and decisions[-1].brief_in_row == 4
    assert decisions[-1].reason == ("4 lives in a row each failed within 300 s of serving, "
                                    "answering 8 in all")
    # A life that served long between them starts the count, and its answers, again.
    p.reset()
    p.record_failure(0.0, LifeEnd(answered=5))
    d = p.record_failure(700.0, LifeEnd(answered=900, served=True))
    assert d.brief_in_row == 0 and not d.give_up
    d = p.record_failure(1400.0, LifeEnd(answered=1))
    assert d.brief_in_row == 1


def test_zero_means_the_in_a_row_counts_never_give_up() -> None:
    p = RestartPolicy(1, 10, max_failures=50, window_s=1, rng=random.Random(0), jitter=0,
                      max_unserved=0, max_brief=0)
    assert not any(p.record_failure(10.0 * i).give_up for i in range(30))
