"""A fake GPU source for tests and demo mode: deterministic numbers, no driver."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from supervisor.gpu.snapshot import GpuProcess, GpuSnapshot, GpuTelemetry
from supervisor.gpu.source import GpuSource

_GIB = 1024**3


class FakeGpuSource(GpuSource):
    """`count` H200-looking GPUs whose load follows a slow deterministic wave.

    `processes` (optional) returns {gpu index: {pid: bytes}} at each sample, so demo mode can
    show the simulated servers' pids holding memory; `unavailable` makes every sample report
    that reason, as a machine without a driver would. Each GPU has NVML's total-energy
    counter, the exact integral of its (stepwise) power over the clock; `missing` with
    "energy_j" takes it away, as on a board without one.
    """

    def __init__(
        self,
        count: int = 8,
        processes: Callable[[], Mapping[int, Mapping[int, int]]] | None = None,
        unavailable: str | None = None,
        missing: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.count = count
        self.unavailable = unavailable
        # metric field name -> reason, e.g. {"sm_clock_mhz": "Not Supported"}
        self.missing = dict(missing or {})
        self._processes = processes
        self._clock = clock
        self._lock = threading.Lock()
        self.samples = 0
        self.closed = False
        self._energy_j = [1.0e6 * (i + 1) for i in range(count)]   # since "driver load"
        self._power_w = [0.0] * count
        self._last_at: float | None = None

    def sample(self) -> GpuTelemetry:
        with self._lock:
            self.samples += 1
            n = self.samples
        now = self._clock()
        if self.unavailable is not None:
            return GpuTelemetry.unavailable(self.unavailable, now)
        procs = self._processes() if self._processes else {}
        gpus = []
        since = 0.0 if self._last_at is None else max(0.0, now - self._last_at)
        self._last_at = now
        for i in range(self.count):
            load = ((n + 3 * i) % 10) / 10.0
            owned = procs.get(i, {})
            # The power held since the last sample was the last sample's power.
            self._energy_j[i] += self._power_w[i] * since
            self._power_w[i] = 120.0 + 500.0 * load
            gpu = GpuSnapshot(
                index=i,
                name="Fake H200",
                uuid=f"GPU-fake-{i:04d}",
                power_w=self._power_w[i],
                power_limit_w=700.0,
                utilization_pct=100.0 * load,
                memory_utilization_pct=50.0 * load,
                memory_used_bytes=sum(owned.values()) or int(120 * _GIB * load),
                memory_total_bytes=141 * _GIB,
                temperature_c=35.0 + 40.0 * load,
                sm_clock_mhz=1980.0,
                processes=tuple(GpuProcess(pid, mem) for pid, mem in sorted(owned.items())),
                energy_j=self._energy_j[i],
            )
            if self.missing:
                gpu = replace(gpu, **{k: None for k in self.missing},
                              errors=tuple(f"{k}: {v}" for k, v in self.missing.items()))
            gpus.append(gpu)
        return GpuTelemetry(available=True, reason=None, sampled_at=now,
                            driver_version="fake", gpus=tuple(gpus))

    def close(self) -> None:
        self.closed = True
