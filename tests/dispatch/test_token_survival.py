"""Kaplan-Meier over output lengths: exact on a hand-worked case, unbiased under censoring."""

from __future__ import annotations

import math
import random

from supervisor.dispatch.token_survival import HIGH, LOW, POINT, TokenSurvival


def _bins(values: list[int], width: int) -> list[int]:
    out: list[int] = []
    for v in values:
        b = v // width
        out.extend([0] * (b + 1 - len(out)))
        out[b] += 1
    return out


def test_hand_worked_kaplan_meier():
    # Lengths 2 and 4 finished, 3 censored (still running at 3). Classic KM: S drops to 2/3
    # at 2 (3 at risk), stays past the censoring, and drops to 0 at 4 (1 at risk).
    curve = TokenSurvival(_bins([2, 4], 1), _bins([3], 1), bin_tokens=1)
    assert curve.survival(1) == 1.0
    assert math.isclose(curve.survival(3), 2 / 3)
    assert math.isclose(curve.survival(4), 2 / 3)
    assert curve.survival(5) == 0.0
    assert curve.covers(10)


def test_without_censoring_the_integral_is_the_capped_mean():
    rng = random.Random(1)
    lengths = [int(rng.lognormvariate(7.6, 0.7)) for _ in range(4000)]
    curve = TokenSurvival(_bins(lengths, 16), [], bin_tokens=16)
    for cap in (1000, 4096, 20000):
        exact = sum(min(v, cap) for v in lengths) / len(lengths)
        assert abs(curve.integral(cap) - exact) / exact < 0.005, cap


def test_censored_in_flight_answers_correct_the_bias_of_a_mean_of_survivors():
    # Answers started at random times; at the moment of the estimate the long ones are
    # still running. The mean of the finished ones is far too low; KM is not.
    rng = random.Random(7)
    cap = 4096
    lengths = [min(int(rng.lognormvariate(7.66, 0.72)), cap) for _ in range(6000)]
    truth = sum(lengths) / len(lengths)
    done, running = [], []
    for v in lengths:
        age = rng.uniform(0, 5000)
        (done if v <= age else running).append(v if v <= age else int(age))
    naive = sum(done) / len(done)
    curve = TokenSurvival(_bins(done, 16), _bins(running, 16), bin_tokens=16)
    assert naive < 0.85 * truth
    assert abs(curve.integral(cap) - truth) / truth < 0.03


def test_unknown_tail_gives_an_interval_that_closes_when_the_data_reach_the_cap():
    short = [100 + 10 * i for i in range(50)]              # finished, all < 600
    still_running = [600] * 50                             # running past 600
    curve = TokenSurvival(_bins(short, 16), _bins(still_running, 16), bin_tokens=16)
    low, point, high = (curve.integral(4096, t) for t in (LOW, POINT, HIGH))
    assert not curve.covers(4096)
    assert low < point < high
    assert math.isclose(high - low, curve.tail_s * (4096 - curve.data_end))
    # The same answers once the long ones were cut off at the cap: nothing left to guess.
    closed = TokenSurvival(_bins(short, 16), _bins([4096] * 50, 16), bin_tokens=16)
    assert closed.covers(4096)
    assert closed.integral(4096, LOW) == closed.integral(4096, HIGH)


def test_residual_of_a_long_running_answer_is_what_remains_beyond_its_age():
    lengths = [1000] * 50 + [3000] * 50
    curve = TokenSurvival(_bins(lengths, 1), [], bin_tokens=1)
    # Past 1000 only the 3000-token answers are left: about 2000 to go from 1000.
    assert abs(curve.residual(1001, 4096) - 1999) < 2
    assert curve.residual(5000, 4096) == 0.0


def test_moments_variance_shrinks_with_more_data():
    rng = random.Random(3)
    few = [int(rng.lognormvariate(7.6, 0.7)) for _ in range(100)]
    many = few + [int(rng.lognormvariate(7.6, 0.7)) for _ in range(9900)]
    m_few = TokenSurvival(_bins(few, 16), [], 16).moments(4096)
    m_many = TokenSurvival(_bins(many, 16), [], 16).moments(4096)
    assert m_many.mean_variance < m_few.mean_variance / 20
    # Spread of one capped length: close to the sample variance.
    capped = [min(v, 4096) for v in many]
    mean = sum(capped) / len(capped)
    var = sum((v - mean) ** 2 for v in capped) / len(capped)
    assert abs(m_many.spread_variance - var) / var < 0.03
