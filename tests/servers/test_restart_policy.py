from __future__ import annotations

import random

from supervisor.servers.restart_policy import RestartPolicy


def test_exponential_backoff_with_cap_and_jitter() -> None:
    p = RestartPolicy(initial_s=5, max_s=60, max_failures=10, window_s=1e6,
                      rng=random.Random(1), jitter=0.2)
    delays = [p.record_failure(float(t)).delay_s for t in range(8)]
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
    assert p.record_failure(0).delay_s == 1
    assert p.record_failure(1).delay_s == 2
    d = p.record_failure(20)  # the first two are outside the window now
    assert not d.give_up and d.failures_in_window == 1 and d.delay_s == 1
