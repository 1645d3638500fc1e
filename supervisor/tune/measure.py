"""A trial window's figures, from per-server output-token counts sampled over time.

The counts are the dispatcher's per-server goodput counters (dispatch_snapshot.py
ServerProgress.kept_tokens): output tokens of answers recorded done, not what SGLang decoded.
A retracted or aborted request's tokens, decoded and thrown away, are exactly what a too
aggressive flag set produces more of; counting SGLang's own generated-token counter would
credit the candidate with them. The job keeps only recorded answers, so that is what we count.

Figures: canary tok/s per GPU, mean control tok/s per GPU, their ratio, and the ratio's noise:
the spread of the same ratio between sub-windows (control vs control when there are two or
more controls: the controls run the same flags, so any spread between them is noise alone).
The noise of a window's ratio is the sub-window spread over sqrt(sub-windows). Pure functions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SUB_WINDOWS = 4


@dataclass(frozen=True)
class Sample:
    """Cumulative counters of every server at one moment (monotonic seconds)."""
    at: float
    tokens: Mapping[str, int]    # goodput output tokens since the daemon started
    answers: Mapping[str, int]   # answers recorded done since the daemon started


@dataclass(frozen=True)
class WindowRule:
    min_window_s: float = 120.0
    max_window_s: float = 900.0
    min_answers: int = 30
    noise_k: float = 3.0         # a gain counts when above noise_k x noise


@dataclass(frozen=True)
class Window:
    """One measured window: the canary against the controls."""
    span_s: float
    answers: int                 # canary answers in the window
    canary_tok_s: float          # per GPU
    controls_tok_s: float | None  # mean per GPU of a control; None: no controls
    ratio: float | None          # canary / controls (canary tok/s alone when weak)
    noise: float | None          # relative standard error of `ratio`; None: too few samples
    weak: bool                   # no controls: the ratio is the canary's tok/s alone


def _rate(first: Sample, last: Sample, server: str, gpus: int) -> float:
    span = last.at - first.at
    if span <= 0:
        return 0.0
    made = last.tokens.get(server, 0) - first.tokens.get(server, 0)
    return max(0, made) / span / max(1, gpus)


def _split(samples: Sequence[Sample], parts: int) -> list[tuple[Sample, Sample]]:
    """Consecutive sub-windows of about equal time, each from one sample to a later one."""
    if len(samples) < 2:
        return []
    start, end = samples[0].at, samples[-1].at
    bounds = [start + (end - start) * i / parts for i in range(parts + 1)]
    pieces: list[tuple[Sample, Sample]] = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        first = min(samples, key=lambda s: abs(s.at - lo))
        last = min(samples, key=lambda s: abs(s.at - hi))
        if last.at > first.at:
            pieces.append((first, last))
    return pieces


def ratio_of(first: Sample, last: Sample, canary: str, controls: Sequence[str],
             gpus: Mapping[str, int]) -> float | None:
    """Canary tok/s over the mean control tok/s (per GPU); the canary alone without
    controls; None when the controls made nothing."""
    c = _rate(first, last, canary, gpus.get(canary, 1))
    if not controls:
        return c
    mean = statistics.fmean(_rate(first, last, n, gpus.get(n, 1)) for n in controls)
    return None if mean <= 0 else c / mean


def _pooled_spread(series: Sequence[Sequence[float]]) -> float | None:
    """The relative spread over sub-windows, pooled over series: each series is divided by
    its own mean first, so two controls that run at different rates (another GPU model, a
    different share of long prompts) add no spread of their own, only their wobble does."""
    pooled: list[float] = []
    for values in series:
        if len(values) < 2:
            continue
        mean = statistics.fmean(values)
        if mean > 0:
            pooled.extend(v / mean for v in values)
    if len(pooled) < 2:
        return None
    return statistics.stdev(pooled)


def noise_of(samples: Sequence[Sample], canary: str, controls: Sequence[str],
             gpus: Mapping[str, int], parts: int = SUB_WINDOWS) -> float | None:
    """The relative standard error of the window's ratio. Two or more controls: each
    control against the mean of the others per sub-window (the spread with no change at
    all); fewer: the canary's own ratio per sub-window. None when there is too little."""
    pieces = _split(samples, parts)
    if len(controls) >= 2:
        pairs = [(n, [o for o in controls if o != n]) for n in controls]
    else:
        pairs = [(canary, list(controls))]
    series = [[r for first, last in pieces
               if (r := ratio_of(first, last, n, others, gpus)) is not None]
              for n, others in pairs]
    spread = _pooled_spread(series)
    if spread is None:
        return None
    return spread / math.sqrt(len(pieces))


def window_of(samples: Sequence[Sample], canary: str, controls: Sequence[str],
              gpus: Mapping[str, int] | None = None) -> Window:
    """The figures of the samples as one window (at least two samples for any rate)."""
    gpus = gpus or {}
    if len(samples) < 2:
        return Window(0.0, 0, 0.0, None if not controls else 0.0, None, None, not controls)
    first, last = samples[0], samples[-1]
    canary_tok_s = _rate(first, last, canary, gpus.get(canary, 1))
    controls_tok_s = (statistics.fmean(_rate(first, last, n, gpus.get(n, 1))
                                       for n in controls) if controls else None)
    answers = last.answers.get(canary, 0) - first.answers.get(canary, 0)
    return Window(span_s=last.at - first.at, answers=max(0, answers),
                  canary_tok_s=canary_tok_s, controls_tok_s=controls_tok_s,
                  ratio=ratio_of(first, last, canary, controls, gpus),
                  noise=noise_of(samples, canary, controls, gpus), weak=not controls)


def gain_of(before: Window, after: Window) -> float | None:
    """ratio_after / ratio_before - 1; None when either ratio is unknown or zero."""
    if before.ratio is None or after.ratio is None or before.ratio <= 0:
        return None
    return after.ratio / before.ratio - 1.0


def combined_noise(before: Window, after: Window) -> float | None:
    """The noise of the gain: the two windows' relative errors added in quadrature."""
    if before.noise is None and after.noise is None:
        return None
    return math.hypot(before.noise or 0.0, after.noise or 0.0)


def window_done(window: Window, gain: float | None, noise: float | None,
                rule: WindowRule) -> tuple[bool, str]:
    """Whether a window may end, and why: `max_window_s` always ends it; before that it
    needs `min_answers` canary answers, `min_window_s`, and a noise well under the gain
    claimed (gain None: a baseline, which needs only the first two)."""
    if window.span_s >= rule.max_window_s:
        return True, f"max window {rule.max_window_s:g} s reached"
    if window.answers < rule.min_answers:
        return False, f"{window.answers} of {rule.min_answers} answers"
    if window.span_s < rule.min_window_s:
        return False, f"{window.span_s:.0f} of {rule.min_window_s:g} s"
    if gain is None:
        return True, "enough answers and time"
    if noise is None:
        return False, "noise not known yet"
    if abs(gain) > rule.noise_k * noise:
        return True, f"gain {gain:+.1%} beyond {rule.noise_k:g} x noise {noise:.1%}"
    return False, f"gain {gain:+.1%} within {rule.noise_k:g} x noise {noise:.1%}"


def turnover_answers(warmup_answers: int, slots: int) -> int:
    """The answers a restarted server's warm-up waits for: at least one whole batch. The
    batch it started with began together, on an empty cache and without the prompts that
    arrive later; until as many answers as it has slots are in, the server still runs part
    of that first batch, and a flag that only matters for a full, mixed batch (a Mamba cache
    that caps the batch, a memory fraction) has not yet been tried. Measured from that
    first batch, a benchmark round once kept a Mamba step that changed nothing."""
    return max(warmup_answers, slots)


def warmed_up(since_ready_s: float, answers_since_ready: int, warmup_s: float,
              warmup_answers: int) -> bool:
    """A restarted server's first seconds and first answers are not measured: its batch
    fills from empty and its first answers are short ones that started late."""
    return since_ready_s >= warmup_s and answers_since_ready >= warmup_answers
