"""Energy per GPU, per output token and per job, from the telemetry samples.

The source, per GPU and per interval between two samples, best first:
- NVML's total-energy counter (millijoules since the driver loaded; Volta and newer): exact
  whatever the power does between samples;
- power x time (the trapezoid of two power readings) where the counter is missing: right on
  average at a one-second sampling interval, blind to spikes shorter than that;
- nothing: the GPU is "unavailable" and left out of every sum, and the figures say so.
A counter that goes backwards (the driver was reloaded) counts that interval by power.
An interval longer than MAX_GAP_S (a stuck driver call, a suspended daemon) counts only
where the counter covers it: guessing power over minutes would be invention.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from supervisor.gpu.snapshot import GpuSnapshot, GpuTelemetry

COUNTER, POWER, UNAVAILABLE = "counter", "power", "unavailable"
J_PER_KWH = 3.6e6
MAX_GAP_S = 30.0


@dataclass(frozen=True)
class GpuEnergy:
    index: int
    source: str                  # counter / power / unavailable (the last interval's)
    joules: float                # since the meter started (plus what a previous run carried)
    window_joules: float         # over the metrics window
    window_watts: float | None   # average power over the window


@dataclass(frozen=True)
class ServerEnergy:
    server: str
    gpus: tuple[int, ...]
    window_joules: float
    tokens_per_joule: float | None     # output tokens per joule over the window


@dataclass(frozen=True)
class EnergySnapshot:
    available: bool              # at least one GPU has a source
    reason: str | None           # why not, when not
    gpus: tuple[GpuEnergy, ...]
    servers: tuple[ServerEnergy, ...]
    kwh: float                   # the job so far
    joules_per_token: float | None     # over the metrics window
    projected_kwh: float | None        # the whole job, at the window's joules per token
    window_s: float


@dataclass
class _Gpu:
    last_at: float | None = None
    last_counter_j: float | None = None
    last_power_w: float | None = None
    joules: float = 0.0
    source: str = UNAVAILABLE
    # (time, joules) per sample
    history: deque[tuple[float, float]] = field(default_factory=deque)


class EnergyMeter:
    def __init__(self, window_s: float, gpus: Sequence[int] | None = None,
                 carried_joules: float = 0.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.window_s = float(window_s)
        # Only these GPUs count (the job's); None: every GPU the driver shows.
        self.only = None if gpus is None else frozenset(gpus)
        self.carried_joules = carried_joules     # from before a daemon restart
        self.clock = clock
        self._gpus: dict[int, _Gpu] = {}
        self._reason: str | None = "not sampled yet"

    def observe(self, telemetry: GpuTelemetry) -> None:
        if not telemetry.available or telemetry.sampled_at is None:
            self._reason = telemetry.reason or "GPU telemetry unavailable"
            return
        self._reason = None
        now = telemetry.sampled_at
        for snap in telemetry.gpus:
            if self.only is not None and snap.index not in self.only:
                continue
            self._step(self._gpus.setdefault(snap.index, _Gpu()), snap, now)

    def _step(self, g: _Gpu, snap: GpuSnapshot, now: float) -> None:
        counter = snap.energy_j
        power = snap.power_w
        if g.last_at is not None and now > g.last_at:
            dt = now - g.last_at
            added, source = None, UNAVAILABLE
            if counter is not None and g.last_counter_j is not None \
                    and counter >= g.last_counter_j:
                added, source = counter - g.last_counter_j, COUNTER
            elif power is not None and g.last_power_w is not None and dt <= MAX_GAP_S:
                added, source = (power + g.last_power_w) / 2.0 * dt, POWER
            if added is not None:
                g.joules += added
            g.source = source
        elif g.last_at is None:
            g.source = COUNTER if counter is not None else POWER if power is not None \
                else UNAVAILABLE
        g.last_at, g.last_counter_j, g.last_power_w = now, counter, power
        g.history.append((now, g.joules))
        # Keep one sample older than the window, so the window's start can be interpolated.
        while len(g.history) > 2 and g.history[1][0] <= now - self.window_s:
            g.history.popleft()

    def _window(self, g: _Gpu, now: float) -> tuple[float, float]:
        """(joules, seconds) over the last window_s, ending at the last sample."""
        if len(g.history) < 2:
            return 0.0, 0.0
        start = max(g.history[0][0], now - self.window_s)
        t0, j0 = g.history[0]
        for t, j in g.history:
            if t <= start:
                t0, j0 = t, j
        end_t, end_j = g.history[-1]
        return end_j - j0, end_t - t0

    def snapshot(self, window_tokens: float, server_tokens: Mapping[str, float] | None = None,
                 server_gpus: Mapping[str, Sequence[int]] | None = None,
                 remaining_tokens: float | None = None,
                 now: float | None = None) -> EnergySnapshot:
        """`window_tokens`: output tokens over the same window; `remaining_tokens`: what the
        job still has to write (the length-aware ETA's estimate), for the projection."""
        now = self.clock() if now is None else now
        gpus, window_j, span = [], 0.0, 0.0
        for index in sorted(self._gpus):
            g = self._gpus[index]
            wj, ws = self._window(g, now)
            gpus.append(GpuEnergy(index, g.source, g.joules, wj, wj / ws if ws > 0 else None))
            if g.source != UNAVAILABLE:
                window_j += wj
                span = max(span, ws)
        measured = [g for g in gpus if g.source != UNAVAILABLE]
        reason = self._reason
        if reason is None and not measured:
            reason = ("no GPU reports energy or power" if gpus else "no GPU seen")
        by_index = {g.index: g for g in gpus}
        servers = []
        for name, indices in sorted((server_gpus or {}).items()):
            own = [by_index[i] for i in indices if i in by_index]
            if not own or any(g.source == UNAVAILABLE for g in own):
                servers.append(ServerEnergy(name, tuple(indices), 0.0, None))
                continue
            sj = sum(g.window_joules for g in own)
            toks = (server_tokens or {}).get(name, 0.0)
            servers.append(ServerEnergy(name, tuple(indices), sj,
                                        toks / sj if sj > 0 else None))
        total_j = self.total_joules
        per_token = window_j / window_tokens if measured and window_tokens > 0 and span > 0 \
            else None
        projected = None
        if per_token is not None and remaining_tokens is not None:
            projected = (total_j + per_token * remaining_tokens) / J_PER_KWH
        return EnergySnapshot(
            available=bool(measured), reason=None if measured else reason,
            gpus=tuple(gpus), servers=tuple(servers), kwh=total_j / J_PER_KWH,
            joules_per_token=per_token, projected_kwh=projected, window_s=self.window_s)

    @property
    def total_joules(self) -> float:
        """What to carry over to the next run of the same job."""
        # A GPU's joules only ever grow over measured intervals, so all of them count.
        return self.carried_joules + sum(g.joules for g in self._gpus.values())
