from __future__ import annotations

import random

from supervisor.servers.restart_policy import RestartPolicy


def test_exponential_backoff_with_cap_and_jitter() -> None:
    p = RestartPolicy(initial_s=5, max_s=60, max_failures=10, window_s=1e6,
                      rng=random.Random(1), jitter=0.2)
    delays = [p.record_failure(float(t), served=True).delay_s for t in range(8)]
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
    assert p.record_failure(0, served=True).delay_s == 1
    assert p.record_failure(1, served=True).delay_s == 2
    d = p.record_failure(20, served=True)  # the first two are outside the window now
    assert not d.give_up and d.failures_in_window == 1 and d.delay_s == 1


def test_lives_failing_in_a_row_without_serving_give_up_however_slow() -> None:
    # A hang found only hang_timeout_s (600 s) after each start never fills a 1,800 s
    # window with 5 failures; the lives that failed without serving still add up.
    p = RestartPolicy(5, 300, max_failures=5, window_s=1800, rng=random.Random(0), jitter=0,
                      max_unserved=4)
    decisions = [p.record_failure(700.0 * i) for i in range(1, 5)]
    assert [d.give_up for d in decisions] == [False, False, False, True]
    assert max(d.failures_in_window for d in decisions) <= 3
    assert decisions[-1].unserved_in_row == 4
    assert decisions[-1].reason == "4 lives in a row failed before 300 s of serving"
    # The backoff grows with the loop, though the window holds few failures.
    assert [d.delay_s for d in decisions[:3]] == [5, 10, 20]
    p.reset()
    assert p.unserved_in_row == 0 and not p.record_failure(1e5).give_up


def test_a_life_that_served_starts_the_count_again() -> None:
    p = RestartPolicy(5, 300, max_failures=50, window_s=10, rng=random.Random(0), jitter=0,
                      max_unserved=3)
    for i in range(20):
        # Two quick failures, then a life that served for hours and failed: never FAILED.
        served = i % 3 == 2
        d = p.record_failure(100.0 * i, served=served)
        assert not d.give_up
        assert d.unserved_in_row == (0 if served else i % 3 + 1)


def test_zero_means_the_in_a_row_count_never_gives_up() -> None:
    p = RestartPolicy(1, 10, max_failures=50, window_s=1, rng=random.Random(0), jitter=0,
                      max_unserved=0)
    assert not any(p.record_failure(10.0 * i).give_up for i in range(30))
