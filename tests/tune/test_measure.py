"""A window's figures from cumulative per-server token counts, checked with numbers."""

from __future__ import annotations

import pytest

from supervisor.tune.measure import (
    Sample,
    WindowRule,
    combined_noise,
    gain_of,
    noise_of,
    warmed_up,
    window_done,
    window_of,
)


def steady(rates: dict[str, list[float]], step_s: float = 10.0) -> list[Sample]:
    """Samples of servers whose tok/s in each step is given; 10 tokens an answer."""
    steps = len(next(iter(rates.values())))
    tokens = {n: 0.0 for n in rates}
    out = [Sample(0.0, {n: 0 for n in rates}, {n: 0 for n in rates})]
    for i in range(steps):
        for n, r in rates.items():
            tokens[n] += r[i] * step_s
        out.append(Sample((i + 1) * step_s, {n: int(t) for n, t in tokens.items()},
                          {n: int(t // 10) for n, t in tokens.items()}))
    return out


def test_the_ratio_is_canary_over_the_mean_control_per_gpu() -> None:
    s = steady({"c": [300.0] * 4, "a": [100.0] * 4, "b": [200.0] * 4})
    w = window_of(s, "c", ["a", "b"])
    assert w.canary_tok_s == pytest.approx(300.0)
    assert w.controls_tok_s == pytest.approx(150.0)
    assert w.ratio == pytest.approx(2.0)
    assert w.span_s == 40.0 and w.answers == 1200 and not w.weak
    assert w.noise == 0.0     # steady controls at different rates: no noise
    # The canary on two GPUs: per GPU it makes half.
    assert window_of(s, "c", ["a", "b"], {"c": 2}).ratio == pytest.approx(1.0)


def test_noise_is_the_control_against_control_spread() -> None:
    # Two controls that swap between 100 and 120 tok/s: a spread with no change at all.
    noisy = steady({"c": [100.0] * 4, "a": [100, 120, 100, 120], "b": [120, 100, 120, 100]})
    quiet = steady({"c": [100.0] * 4, "a": [100.0] * 4, "b": [100.0] * 4})
    assert noise_of(quiet, "c", ["a", "b"], {}) == 0.0
    n = noise_of(noisy, "c", ["a", "b"], {})
    assert n is not None and 0.05 < n < 0.2


def test_gain_compares_the_ratio_after_with_the_ratio_before() -> None:
    before = window_of(steady({"c": [100.0] * 4, "a": [100.0] * 4}), "c", ["a"])
    # The workload halves everyone's rate, the canary's new flags double its share.
    after = window_of(steady({"c": [100.0] * 4, "a": [50.0] * 4}), "c", ["a"])
    assert gain_of(before, after) == pytest.approx(1.0)


def test_one_server_is_the_canary_alone_and_weak() -> None:
    w = window_of(steady({"c": [200.0, 220.0, 200.0, 220.0]}), "c", [])
    assert w.weak and w.controls_tok_s is None and w.ratio == pytest.approx(210.0)
    assert w.noise is not None and w.noise > 0


def test_the_window_ends_only_when_the_noise_is_well_under_the_gain() -> None:
    rule = WindowRule(min_window_s=30, max_window_s=100, min_answers=10, noise_k=3)
    w = window_of(steady({"c": [100.0] * 4, "a": [100.0] * 4}), "c", ["a"])
    assert window_done(w, 0.10, 0.02, rule)[0]
    done, why = window_done(w, 0.05, 0.02, rule)
    assert not done and "within 3 x noise" in why
    assert window_done(w, None, None, rule) == (True, "enough answers and time")
    few = window_of(steady({"c": [1.0] * 4, "a": [1.0] * 4}), "c", ["a"])
    assert window_done(few, 0.5, 0.01, rule) == (False, "4 of 10 answers")
    long = window_of(steady({"c": [1.0] * 11, "a": [1.0] * 11}), "c", ["a"])
    assert window_done(long, 0.0, 0.5, rule)[0]


def test_combined_noise_adds_in_quadrature() -> None:
    a = window_of(steady({"c": [100, 120, 100, 120], "x": [100.0] * 4}), "c", ["x"])
    assert a.noise is not None
    assert combined_noise(a, a) == pytest.approx(a.noise * 2 ** 0.5)


def test_warm_up_needs_time_and_answers() -> None:
    assert not warmed_up(10, 50, warmup_s=30, warmup_answers=5)
    assert not warmed_up(60, 2, warmup_s=30, warmup_answers=5)
    assert warmed_up(30, 5, warmup_s=30, warmup_answers=5)
