"""Frozen GPU telemetry records: what the daemon publishes and the TUI draws.

Every metric is optional: a driver that does not support one (NVMLError_NotSupported, common
on consumer boards and in some VMs) leaves it None and says why in `errors`, so one missing
number never hides the others.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    # None where the driver cannot attribute memory to the process (e.g. MIG, some containers).
    used_memory_bytes: int | None


@dataclass(frozen=True)
class GpuSnapshot:
    index: int
    name: str | None
    uuid: str | None
    power_w: float | None
    power_limit_w: float | None
    utilization_pct: float | None
    memory_utilization_pct: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_c: float | None
    sm_clock_mhz: float | None
    processes: tuple[GpuProcess, ...] = ()
    # "metric: reason" for each metric the driver would not give us.
    errors: tuple[str, ...] = ()
    # NVML's total-energy counter: joules since the driver loaded (None: not supported).
    energy_j: float | None = None


@dataclass(frozen=True)
class GpuTelemetry:
    """One sample of every GPU, or the reason there is none."""

    available: bool
    # Why there is no data ("NVML Shared Library Not Found", ...); None when available.
    reason: str | None
    sampled_at: float | None
    driver_version: str | None = None
    gpus: tuple[GpuSnapshot, ...] = ()

    @classmethod
    def unavailable(cls, reason: str, sampled_at: float | None = None) -> GpuTelemetry:
        return cls(available=False, reason=reason, sampled_at=sampled_at)

    def gpu(self, index: int) -> GpuSnapshot | None:
        return next((g for g in self.gpus if g.index == index), None)

    def memory_by_pid(self) -> dict[int, int]:
        """GPU memory in bytes per process, summed over GPUs (a TP server spans several)."""
        out: dict[int, int] = {}
        for g in self.gpus:
            for p in g.processes:
                if p.used_memory_bytes is not None:
                    out[p.pid] = out.get(p.pid, 0) + p.used_memory_bytes
        return out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
