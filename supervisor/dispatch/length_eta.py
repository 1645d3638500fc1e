"""A length-aware ETA: remaining output tokens / output tokens per second, with an interval.

The windowed req/s ETA is biased while a job is young: its first completions are its
shortest answers. Here the unit of work is the token, not the request:

  remaining tokens = pending prompts x E[min(L, max_tokens)]
                   + for each request in flight, E[tokens still to come | L > its age]
  tok/s            = requests in flight x per-request decode rate
  ETA              = remaining tokens / tok/s + the drain (the last answers run alone)

E[...] comes from a Kaplan-Meier curve over every answer seen (token_survival.py), where an
answer cut off at max_tokens, and a request still decoding, are censored observations: a
request in flight for t seconds has written at least t x the per-request decode rate. The
decode rate is a ratio of sums (tokens / seconds) over recent completions, so it includes
the server's queueing and prefill, and the age it gives is a lower bound, as censoring needs.

The 80% interval adds the sampling error of the mean length, the spread of the remaining
prompts' lengths, the spread of the decode rate, and (while the longest answers have not
been seen) everything the data allow about the tail. "Warming up" means what is not known
yet: the longest answers have not been seen, or the mean length is still uncertain by more
than 2% - not that some fixed time has not passed.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Hashable, Mapping

from supervisor.dispatch.token_survival import HIGH, LOW, POINT, TokenSurvival

Z80 = 1.2816             # two-sided 80%: the 10th and 90th percentiles of a normal
MIN_EVENTS = 30          # fewer finished answers than this: no estimate yet
MAX_MEAN_RSE = 0.02      # the mean length known better than this: no longer warming up


@dataclass(frozen=True)
class EtaEstimate:
    eta_s: float | None              # None: no estimate (reason says why)
    low_s: float | None              # the 80% interval
    high_s: float | None
    warming_up: bool
    reason: str | None               # why warming up / no estimate
    expected_tokens: float | None    # E[min(L, max_tokens)] for a fresh prompt
    remaining_tokens: float | None
    tok_per_s: float | None          # output tokens/s now (in flight x decode rate)
    decode_tok_per_s: float | None   # one request's decode rate
    observed: int                    # finished answers behind the curve (truncated included)
    censored: int                    # of them, cut off at max_tokens, plus requests in flight


@dataclass
class _Running:
    started: float
    max_tokens: int


class LengthEta:
    def __init__(self, *, bin_tokens: int = 16, rate_samples: int = 512,
                 clock: Callable[[], float] = time.time) -> None:
        self.bin_tokens = bin_tokens
        self.clock = clock
        self._events: list[int] = []      # finished by themselves, per length bin
        self._censored: list[int] = []    # cut off (finish_reason length), per bin
        self._running: dict[Hashable, _Running] = {}
        self._rates: deque[tuple[int, float]] = deque(maxlen=rate_samples)

    # -- what the dispatcher reports ----------------------------------------------------------

    def started(self, key: Hashable, max_tokens: int, now: float | None = None) -> None:
        self._running[key] = _Running(self.clock() if now is None else now, max_tokens)

    def dropped(self, key: Hashable) -> None:
        """The request ended without an answer (retry, requeue): no length learnt."""
        self._running.pop(key, None)

    def finished(self, key: Hashable, completion_tokens: int, truncated: bool,
                 now: float | None = None) -> None:
        run = self._running.pop(key, None)
        now = self.clock() if now is None else now
        self._add(self._censored if truncated else self._events, completion_tokens)
        if run is not None and now > run.started and completion_tokens > 0:
            self._rates.append((completion_tokens, now - run.started))

    def _add(self, bins: list[int], tokens: int) -> None:
        b = max(0, int(tokens)) // self.bin_tokens
        if b >= len(bins):
            bins.extend([0] * (b + 1 - len(bins)))
        bins[b] += 1

    @property
    def running(self) -> int:
        """Requests on the wire (the rest of the store's in_flight prompts wait in a buffer)."""
        return len(self._running)

    # -- the estimate -------------------------------------------------------------------------

    def decode_rate(self) -> tuple[float, float] | None:
        """(tokens/s per request, its relative standard error) over recent completions."""
        if len(self._rates) < 2:
            return None
        tokens = sum(t for t, _ in self._rates)
        seconds = sum(s for _, s in self._rates)
        if seconds <= 0:
            return None
        rate = tokens / seconds
        # Ratio estimator's standard error: spread of (tokens - rate x seconds).
        n = len(self._rates)
        mean_s = seconds / n
        resid = sum((t - rate * s) ** 2 for t, s in self._rates) / (n - 1)
        return rate, math.sqrt(resid / n) / (mean_s * rate)

    def estimate(self, pending: int, max_tokens: int, now: float | None = None,
                 pending_floors: Mapping[int, int] | None = None) -> EtaEstimate:
        """`pending` prompts not started; `pending_floors` {tokens: count} of them already
        known to run past `tokens` (truncated earlier and requeued at a higher limit)."""
        now = self.clock() if now is None else now
        events = sum(self._events)
        cut = sum(self._censored)
        rate = self.decode_rate()
        running = list(self._running.values())
        if events < MIN_EVENTS or rate is None:
            return self._none(f"{events} of {MIN_EVENTS} answers needed", events + cut,
                              cut + len(running))
        per_req, rate_rse = rate
        censored = list(self._censored)
        ages = []
        for r in running:
            age = min((now - r.started) * per_req, max(r.max_tokens - 1, 0))
            ages.append((age, r.max_tokens))
            self._add(censored, int(age))
        curve = TokenSurvival(self._events, censored, self.bin_tokens)
        floors = {f: c for f, c in (pending_floors or {}).items() if c > 0 and f > 0}
        fresh = max(0, pending - sum(floors.values()))

        def remaining(tail: str) -> float:
            total = fresh * curve.integral(max_tokens, tail)
            for floor, count in floors.items():
                total += count * (floor + curve.residual(floor, max_tokens, tail))
            return total + sum(curve.residual(a, m, tail) for a, m in ages)

        point = remaining(POINT)
        low, high = remaining(LOW), remaining(HIGH)
        m = curve.moments(max_tokens, POINT)
        # Fresh prompts: the mean is uncertain (shared by all) and each length varies.
        sd_tokens = math.sqrt(fresh * fresh * m.mean_variance + fresh * m.spread_variance)
        tok_s = len(running) * per_req
        base = {"expected_tokens": m.mean, "remaining_tokens": point,
                "decode_tok_per_s": per_req, "observed": events + cut,
                "censored": cut + len(running)}
        if point <= 0:
            return EtaEstimate(0.0, 0.0, 0.0, False, None, tok_per_s=tok_s, **base)
        if tok_s <= 0:
            return EtaEstimate(None, None, None, True, "nothing in flight",
                               tok_per_s=0.0, **base)
        # The job ends with its longest answer, not its average one: the tail where slots
        # empty one by one, in seconds.
        if fresh or floors:
            tail_s = curve.drain_excess(len(running), max_tokens) / per_req
            fluid = 1.0
        else:
            tail_s = curve.longest_residual(ages) / per_req
            fluid = 0.0          # nothing pending: the longest residual is the whole answer
        eta = fluid * point / tok_s + tail_s
        lo_tokens = max(0.0, low - Z80 * sd_tokens)
        hi_tokens = high + Z80 * sd_tokens
        # The decode rate's error scales the whole time; combine it as a relative spread.
        lo_s = (fluid * lo_tokens / tok_s + tail_s) / (1.0 + Z80 * rate_rse)
        hi_s = (fluid * hi_tokens / tok_s + tail_s) / max(1e-3, 1.0 - Z80 * rate_rse)
        reason = None
        if not curve.covers(max_tokens):
            reason = (f"longest answers not seen yet (data up to {curve.data_end:.0f} of "
                      f"{max_tokens} tokens)")
        elif math.sqrt(m.mean_variance) > MAX_MEAN_RSE * m.mean:
            reason = (f"mean length still uncertain ({m.mean:.0f} +/- "
                      f"{math.sqrt(m.mean_variance):.0f} tokens)")
        return EtaEstimate(eta, lo_s, hi_s, reason is not None, reason, tok_per_s=tok_s,
                           **base)

    def _none(self, reason: str, observed: int, censored: int) -> EtaEstimate:
        return EtaEstimate(None, None, None, True, reason, None, None, None, None,
                           observed, censored)
