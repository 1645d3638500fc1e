"""A length-aware ETA: remaining output tokens / output tokens per second, with an interval.

The windowed req/s ETA is biased while a job is young: its first completions are its
shortest answers. Here the unit of work is the token, not the request:

  remaining tokens = pending prompts x E[min(L, max_tokens)]
                   + for each request in flight, E[tokens still to come | L > its age]
  tok/s            = requests in flight x per-request decode rate (less a fixed overhead
                     per request: queueing, prefill, HTTP)
  ETA              = remaining tokens / tok/s + the drain (the last answers run alone)

E[...] comes from a Kaplan-Meier curve over every answer seen (token_survival.py), where an
answer cut off at max_tokens, and a request still decoding, are censored observations: a
request in flight for t seconds has written about (t - overhead) x the per-request decode
rate, both fitted over recent completions (seconds = overhead + tokens / rate).

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
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class DecodeSpeed:
    tok_per_s: float         # one request's decode rate
    overhead_s: float        # what every request costs besides decoding
    rse: float               # relative standard error of tok_per_s


@dataclass
class _Running:
    started: float
    max_tokens: int


class LengthEta:
    def __init__(self, *, bin_tokens: int = 16, rate_samples: int = 512,
                 busy_window_s: float = 60.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.bin_tokens = bin_tokens
        self.busy_window_s = busy_window_s
        self.clock = clock
        # Requests in flight, integrated over time: the slots kept busy on average over the
        # window, so a moment's dip (a slow claim, a burst of retries) is not taken for the
        # rate of the rest of the job.
        self._busy_area = 0.0
        self._busy_at: float | None = None
        self._busy_marks: deque[tuple[float, float]] = deque()
        # The busy-slot average as each estimate saw it: how steady the throughput has been.
        self._busy_seen: deque[float] = deque(maxlen=300)
        self._events: list[int] = []      # finished by themselves, per length bin
        self._censored: list[int] = []    # cut off (finish_reason length), per bin
        self._running: dict[Hashable, _Running] = {}
        self._rates: deque[tuple[int, float]] = deque(maxlen=rate_samples)

    # -- what the dispatcher reports ----------------------------------------------------------

    def _tick(self, now: float) -> None:
        if self._busy_at is not None and now > self._busy_at:
            self._busy_area += len(self._running) * (now - self._busy_at)
        if self._busy_at is None or now > self._busy_at:
            self._busy_at = now

    def started(self, key: Hashable, max_tokens: int, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        self._tick(now)
        self._running[key] = _Running(now, max_tokens)

    def dropped(self, key: Hashable) -> None:
        """The request ended without an answer (retry, requeue): no length learnt."""
        if key in self._running:
            self._tick(self.clock())
            del self._running[key]

    def finished(self, key: Hashable, completion_tokens: int, truncated: bool,
                 now: float | None = None) -> None:
        now = self.clock() if now is None else now
        self._tick(now)
        run = self._running.pop(key, None)
        self._add(self._censored if truncated else self._events, completion_tokens)
        if run is not None and now > run.started and completion_tokens > 0:
            self._rates.append((completion_tokens, now - run.started))

    def _add(self, bins: list[int], tokens: int) -> None:
        b = max(0, int(tokens)) // self.bin_tokens
        if b >= len(bins):
            bins.extend([0] * (b + 1 - len(bins)))
        bins[b] += 1

    def busy_slots(self, now: float) -> float:
        """Requests in flight, averaged over the last busy_window_s."""
        self._tick(now)
        marks = self._busy_marks
        marks.append((now, self._busy_area))
        while len(marks) > 2 and marks[1][0] <= now - self.busy_window_s:
            marks.popleft()
        t0, a0 = marks[0]
        if now - t0 < 1.0:
            return float(len(self._running))
        return (self._busy_area - a0) / (now - t0)

    def _rate_drift(self, overhead: float, blocks: int = 8) -> float:
        """How much the decode rate moved across recent completions, relative: the spread
        of the rate over consecutive blocks of them. A fit's standard error assumes the
        rate holds still; a node whose rate drifts (thermal limits, a neighbour's load,
        batch composition) must show a wider interval for it."""
        samples = list(self._rates)
        size = len(samples) // blocks
        if size < 8:
            return 0.0
        rates = []
        for b in range(blocks):
            chunk = samples[b * size:(b + 1) * size]
            busy = sum(s for _, s in chunk) - overhead * len(chunk)
            if busy <= 0:
                return 0.0
            rates.append(sum(t for t, _ in chunk) / busy)
        mean = sum(rates) / blocks
        return math.sqrt(sum((r - mean) ** 2 for r in rates) / (blocks - 1)) / mean

    def _busy_spread(self, slots: float) -> float:
        """Coefficient of variation of the busy-slot average over recent estimates."""
        seen = self._busy_seen
        seen.append(slots)
        if len(seen) < 10:
            return 0.0
        mean = sum(seen) / len(seen)
        if mean <= 0:
            return 0.0
        return math.sqrt(sum((x - mean) ** 2 for x in seen) / (len(seen) - 1)) / mean

    @property
    def running(self) -> int:
        """Requests on the wire (the rest of the store's in_flight prompts wait in a buffer)."""
        return len(self._running)

    # -- the estimate -------------------------------------------------------------------------

    def decode_speed(self) -> DecodeSpeed | None:
        """Fitted over recent completions: seconds = overhead + tokens / rate.

        The overhead (queueing, prefill, HTTP) is what a short answer pays as much as a long
        one; a plain tokens/seconds ratio would charge it per token, and the first answers of
        a job (the short ones) would make the rate look slow and the ETA long."""
        n = len(self._rates)
        if n < 2:
            return None
        mt = sum(t for t, _ in self._rates) / n
        ms = sum(s for _, s in self._rates) / n
        sxx = sum((t - mt) ** 2 for t, _ in self._rates)
        sxy = sum((t - mt) * (s - ms) for t, s in self._rates)
        if sxx > 0 and sxy > 0 and n > 2:
            slope = sxy / sxx                     # seconds per token
            overhead = ms - slope * mt
            if overhead >= 0:
                resid = sum((s - overhead - slope * t) ** 2 for t, s in self._rates) / (n - 2)
                return DecodeSpeed(1.0 / slope, overhead, math.sqrt(resid / sxx) / slope)
        if ms <= 0:
            return None
        # Too little spread in the lengths to fit both: a ratio through the origin.
        rate = mt / ms
        resid = sum((t - rate * s) ** 2 for t, s in self._rates) / (n - 1)
        return DecodeSpeed(rate, 0.0, math.sqrt(resid / n) / (ms * rate))

    def estimate(self, pending: int, max_tokens: int, now: float | None = None,
                 pending_floors: Mapping[int, int] | None = None) -> EtaEstimate:
        """`pending` prompts not started; `pending_floors` {tokens: count} of them already
        known to run past `tokens` (truncated earlier and requeued at a higher limit)."""
        now = self.clock() if now is None else now
        events = sum(self._events)
        cut = sum(self._censored)
        speed = self.decode_speed()
        running = list(self._running.values())
        if events < MIN_EVENTS or speed is None:
            return self._none(f"{events} of {MIN_EVENTS} answers needed", events + cut,
                              cut + len(running))
        per_req, overhead, rate_rse = speed.tok_per_s, speed.overhead_s, speed.rse
        censored = list(self._censored)
        ages = []
        for r in running:
            decoding = max(0.0, now - r.started - overhead)
            age = min(decoding * per_req, max(r.max_tokens - 1, 0))
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
        slots = self.busy_slots(now) if running else 0.0
        to_start = fresh + sum(floors.values())
        # Output tok/s with every slot busy: each answer costs its tokens plus the overhead.
        tok_s = slots * per_req * m.mean / (m.mean + overhead * per_req) if m.mean > 0 else 0.0
        base: dict[str, Any] = {"expected_tokens": m.mean, "remaining_tokens": point,
                "decode_tok_per_s": per_req, "observed": events + cut,
                "censored": cut + len(running)}
        if point <= 0:
            return EtaEstimate(0.0, 0.0, 0.0, False, None, tok_per_s=tok_s, **base)
        if tok_s <= 0:
            return EtaEstimate(None, None, None, True, "nothing in flight",
                               tok_per_s=0.0, **base)
        # The job ends with its longest answer, not its average one: the tail where slots
        # empty one by one, in seconds.
        if to_start:
            tail_s = curve.drain_excess(slots, max_tokens) / per_req
            fluid = 1.0
        else:
            tail_s = curve.longest_residual(ages) / per_req
            fluid = 0.0          # nothing pending: the longest residual is the whole answer

        def seconds(tokens: float) -> float:
            # Slot-seconds: decoding every token, plus each prompt not started's overhead.
            return fluid * (tokens / per_req + to_start * overhead) / slots + tail_s

        eta = seconds(point)
        # The decode rate's error scales the whole time; combine it as a relative spread.
        # The decode rate's error and the throughput's own unsteadiness (slots not kept busy,
        # a server restarting) scale the whole time; combined as one relative spread.
        rel = math.hypot(rate_rse, self._rate_drift(overhead),
                         self._busy_spread(slots) if to_start else 0.0)
        lo_s = seconds(max(0.0, low - Z80 * sd_tokens)) / (1.0 + Z80 * rel)
        hi_s = seconds(high + Z80 * sd_tokens) / max(1e-3, 1.0 - Z80 * rel)
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
