"""Kaplan-Meier survival of output lengths, in tokens, with right-censored observations.

Why survival and not a mean: the answers that have finished early in a job are the short
ones, so their mean is biased low. A request still decoding, or one cut off at max_tokens,
tells us its answer is *at least* that long; Kaplan-Meier uses exactly that ("censored"),
where a mean of the finished ones throws it away.

Lengths are binned (`bin_tokens` wide) so an estimate over a million answers costs one pass
over a few thousand bins. Within a bin, events are taken as spread evenly (trapezoid rule);
a censored length counts as at risk for the whole of its bin.

Beyond the longest length observed the curve is unknown. Three tails answer three questions:
- "low": every answer still running past it ends right there (the least the data allows);
- "high": none ends before the cap (the most the data allows);
- "point": the hazard seen so far continues (an exponential tail) - the estimate to show.
Once the data reach the cap the three agree: nothing about the tail is guessed any more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LOW, POINT, HIGH = "low", "point", "high"


@dataclass(frozen=True)
class LengthMoments:
    """Of min(L, cap) for one fresh prompt, L its natural output length."""
    mean: float
    mean_variance: float      # sampling variance of `mean` (Greenwood-type, for the RMST)
    spread_variance: float    # variance of one prompt's length about the mean


class TokenSurvival:
    """S(x) = P(L > x) from binned event and censored counts."""

    def __init__(self, events: Sequence[int], censored: Sequence[int], bin_tokens: int) -> None:
        self.w = float(bin_tokens)
        n = max(len(events), len(censored))
        ev = [events[i] if i < len(events) else 0 for i in range(n)]
        ce = [censored[i] if i < len(censored) else 0 for i in range(n)]
        # Trim empty bins at the end: the data stop at the last bin with an observation.
        while n and ev[n - 1] == 0 and ce[n - 1] == 0:
            n -= 1
        self.n_bins = n
        self.events_total = sum(ev[:n])
        self.observations = self.events_total + sum(ce[:n])
        # surv[b]: S at the right edge of bin b; cum[b]: integral of S over [0, edge of b].
        self.surv: list[float] = []
        self.cum: list[float] = []
        self._events = ev[:n]
        self._at_risk: list[int] = []
        at_risk = self.observations
        s, area = 1.0, 0.0
        for b in range(n):
            self._at_risk.append(at_risk)
            before = s
            if at_risk > 0 and ev[b]:
                s *= 1.0 - ev[b] / at_risk
            area += self.w * (before + s) / 2.0
            self.surv.append(s)
            self.cum.append(area)
            at_risk -= ev[b] + ce[b]
        self.data_end = n * self.w       # lengths beyond this were never observed
        self.tail_s = s                  # S at data_end
        exposure = sum(self._exposure(ev[:n], ce[:n]))
        # Exponential hazard per token, the MLE over everything seen; a floor keeps a job with
        # no event yet from claiming its answers never end.
        self.hazard = max(self.events_total / exposure if exposure > 0 else 0.0, 1e-6)

    def _exposure(self, ev: list[int], ce: list[int]) -> list[float]:
        return [(b + 0.5) * self.w * (ev[b] + ce[b]) for b in range(len(ev))]

    # -- the curve ----------------------------------------------------------------------------

    def survival(self, x: float, tail: str = POINT) -> float:
        """P(L > x)."""
        if x <= 0:
            return 1.0
        if x >= self.data_end:
            return self._tail_s(x, tail)
        b = int(x // self.w)
        left = 1.0 if b == 0 else self.surv[b - 1]
        frac = (x - b * self.w) / self.w
        return left + (self.surv[b] - left) * frac

    def _tail_s(self, x: float, tail: str) -> float:
        if tail == LOW:
            return 0.0
        if tail == HIGH:
            return self.tail_s
        return self.tail_s * math.exp(-self.hazard * (x - self.data_end))

    def integral(self, x: float, tail: str = POINT) -> float:
        """The integral of S over [0, x]: the mean of min(L, x)."""
        if x <= 0:
            return 0.0
        if x <= self.data_end:
            b = int(x // self.w)
            if b >= self.n_bins:
                b = self.n_bins - 1
            left_area = 0.0 if b == 0 else self.cum[b - 1]
            left_s = 1.0 if b == 0 else self.surv[b - 1]
            dx = x - b * self.w
            return left_area + dx * (left_s + self.survival(x)) / 2.0
        base = self.cum[-1] if self.cum else 0.0
        beyond = x - self.data_end
        if tail == LOW:
            return base
        if tail == HIGH:
            return base + self.tail_s * beyond
        return base + self.tail_s * (1.0 - math.exp(-self.hazard * beyond)) / self.hazard

    def covers(self, cap: float) -> bool:
        """Whether min(L, cap) is known without any tail assumption."""
        return self.data_end >= cap or self.tail_s == 0.0

    def residual(self, age: float, cap: float, tail: str = POINT) -> float:
        """E[min(L, cap) - age | L > age]: tokens still to come for an answer `age` long."""
        if age >= cap:
            return 0.0
        s = self.survival(age, tail)
        if s <= 1e-12:
            # The data say it should have ended already; it has not. Expect it to run to the
            # cap when being pessimistic, else half way.
            return (cap - age) if tail == HIGH else (cap - age) / 2.0
        return (self.integral(cap, tail) - self.integral(age, tail)) / s

    def moments(self, cap: float, tail: str = POINT) -> LengthMoments:
        """Mean and variances of min(L, cap) for a prompt not yet started."""
        mean = self.integral(cap, tail)
        # E[min(L,cap)^2] = integral of 2x S(x) over [0, cap]; bin by bin, then the tail.
        second = 0.0
        end = min(cap, self.data_end)
        x = 0.0
        while x < end:
            step = min(self.w, end - x)
            mid = x + step / 2.0
            second += 2.0 * mid * self.survival(mid, tail) * step
            x += step
        if cap > self.data_end:
            # A few coarse steps suffice for the tail's share of the second moment.
            steps = 32
            step = (cap - self.data_end) / steps
            for i in range(steps):
                mid = self.data_end + (i + 0.5) * step
                second += 2.0 * mid * self.survival(mid, tail) * step
        spread = max(0.0, second - mean * mean)
        # Greenwood-type variance of the restricted mean: sum over bins of
        # A_b^2 d_b / (Y_b (Y_b - d_b)), A_b the area under S from bin b to the cap.
        var = 0.0
        total = self.integral(cap, tail)
        for b in range(min(self.n_bins, int(math.ceil(cap / self.w)))):
            d, y = self._events[b], self._at_risk[b]
            if d and y > d:
                area_after = total - self.integral((b + 0.5) * self.w, tail)
                var += area_after * area_after * d / (y * (y - d))
        return LengthMoments(mean, var, spread)

    # -- the end of a job ---------------------------------------------------------------------

    def drain_excess(self, slots: float, cap: float, steps: int = 128) -> float:
        """Tokens per slot by which the last answer outlasts the average one.

        While prompts are pending every slot decodes; once they run out, the job ends with
        the longest answer still running, not with the average one. With `slots` busy slots
        at a random moment, each one's remaining tokens follow the equilibrium (residual)
        distribution F_e(x) = integral of S over [0, x] / mean; the excess is
        E[max of `slots` draws] - E[one draw] = integral of (F_e - F_e^slots).
        """
        mean = self.integral(cap)
        if slots <= 1 or mean <= 0:
            return 0.0
        step = cap / steps
        excess = 0.0
        for i in range(steps):
            f = self.integral((i + 0.5) * step) / mean
            excess += (f - f ** slots) * step
        return excess

    def longest_residual(self, ages: Sequence[tuple[float, float]], steps: int = 48) -> float:
        """E[max over running answers of their tokens still to come]; `ages` are (age, cap)
        pairs. The job's end once nothing is pending."""
        if not ages:
            return 0.0
        horizon = max(cap - age for age, cap in ages)
        if horizon <= 0:
            return 0.0
        base = [(age, cap, self.survival(age)) for age, cap in ages]
        step = horizon / steps
        total = 0.0
        for i in range(steps):
            x = (i + 0.5) * step
            all_done = 1.0
            for age, cap, s0 in base:
                if age + x >= cap or s0 <= 1e-12:
                    continue
                all_done *= 1.0 - self.survival(age + x) / s0
                if all_done == 0.0:
                    break
            total += (1.0 - all_done) * step
        return total
