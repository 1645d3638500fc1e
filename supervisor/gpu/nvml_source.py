"""GPU telemetry from NVML (the nvidia-ml-py distribution, imported as `pynvml`).

Each driver call goes through `_metric`, which turns an NVMLError into None plus a reason: a
board that does not report, say, its SM clock still reports its power. Only a failure to load
or initialise the driver at all makes the whole sample "unavailable" (the case on a machine
with no GPU), and initialisation is retried now and then because a driver can come back.
"""

from __future__ import annotations

import logging
import threading
import time
from types import ModuleType
from typing import Any, Callable, TypeVar

from supervisor.gpu.snapshot import GpuProcess, GpuSnapshot, GpuTelemetry
from supervisor.gpu.source import GpuSource

log = logging.getLogger(__name__)

T = TypeVar("T")

# NVML reports power in milliwatts; everything we publish is watts.
_MW_PER_W = 1000.0


def _text(value: Any) -> str:
    # Older bindings return bytes, newer ones str.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlSource(GpuSource):
    def __init__(
        self,
        nvml: ModuleType | None = None,
        retry_init_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # `nvml` is injectable so tests drive this code with a fake driver module.
        self._nvml = nvml
        self._retry_init_s = retry_init_s
        self._clock = clock
        self._lock = threading.Lock()
        self._initialised = False
        self._init_error: str | None = None
        self._next_init_at = 0.0

    # -- driver lifecycle -------------------------------------------------------------------

    def _module(self) -> ModuleType | None:
        if self._nvml is None:
            try:
                import pynvml  # the nvidia-ml-py distribution ships this module
            except ImportError as exc:  # pragma: no cover - it is a declared dependency
                self._init_error = f"nvidia-ml-py is not installed ({exc})"
                return None
            self._nvml = pynvml
        return self._nvml

    def _ensure_init(self, now: float) -> str | None:
        """None when NVML is up, else the reason it is not."""
        if self._initialised:
            return None
        if now < self._next_init_at and self._init_error is not None:
            return self._init_error
        nvml = self._module()
        if nvml is None:
            return self._init_error
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self._init_error = f"NVML unavailable: {exc}"
        except OSError as exc:  # a broken libnvidia-ml.so can fail below NVML's own checks
            self._init_error = f"NVML unavailable: {exc}"
        else:
            self._initialised = True
            self._init_error = None
            return None
        if self._next_init_at == 0.0:
            # Once per daemon, and short: on a machine without GPUs (the demo) it is expected.
            log.warning("GPU figures n/a: %s", self._init_error)
        self._next_init_at = now + self._retry_init_s
        return self._init_error

    def close(self) -> None:
        with self._lock:
            if self._initialised and self._nvml is not None:
                try:
                    self._nvml.nvmlShutdown()
                except self._nvml.NVMLError:
                    pass
            self._initialised = False

    # -- sampling ---------------------------------------------------------------------------

    def _metric(self, name: str, errors: list[str], fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except self._nvml.NVMLError as exc:  # type: ignore[union-attr]
            errors.append(f"{name}: {exc}")
            return None

    def _device(self, index: int) -> GpuSnapshot:
        nvml = self._nvml
        assert nvml is not None
        errors: list[str] = []
        handle = self._metric("handle", errors, lambda: nvml.nvmlDeviceGetHandleByIndex(index))
        if handle is None:
            return GpuSnapshot(index, None, None, None, None, None, None, None, None, None, None,
                               (), tuple(errors))
        m = lambda name, fn: self._metric(name, errors, fn)  # noqa: E731
        name = m("name", lambda: _text(nvml.nvmlDeviceGetName(handle)))
        uuid = m("uuid", lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
        power_mw = m("power", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        limit_mw = m("power_limit", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        util = m("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        mem = m("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        temp = m("temperature",
                 lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        sm = m("sm_clock", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        procs = m("processes", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        # Millijoules since the driver loaded; NotSupported before Volta.
        energy_mj = m("energy", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        return GpuSnapshot(
            index=index,
            name=name,
            uuid=uuid,
            power_w=None if power_mw is None else power_mw / _MW_PER_W,
            power_limit_w=None if limit_mw is None else limit_mw / _MW_PER_W,
            utilization_pct=None if util is None else float(util.gpu),
            memory_utilization_pct=None if util is None else float(util.memory),
            memory_used_bytes=None if mem is None else int(mem.used),
            memory_total_bytes=None if mem is None else int(mem.total),
            temperature_c=None if temp is None else float(temp),
            sm_clock_mhz=None if sm is None else float(sm),
            processes=tuple(
                GpuProcess(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                for p in (procs or ())
            ),
            errors=tuple(errors),
            energy_j=None if energy_mj is None else energy_mj / 1000.0,
        )

    def sample(self) -> GpuTelemetry:
        with self._lock:
            now = self._clock()
            reason = self._ensure_init(now)
            if reason is not None:
                return GpuTelemetry.unavailable(reason, now)
            nvml = self._nvml
            assert nvml is not None
            try:
                count = nvml.nvmlDeviceGetCount()
            except nvml.NVMLError as exc:
                return GpuTelemetry.unavailable(f"NVML device count failed: {exc}", now)
            errors: list[str] = []
            driver = self._metric("driver_version", errors,
                                  lambda: _text(nvml.nvmlSystemGetDriverVersion()))
            gpus = tuple(self._device(i) for i in range(count))
            return GpuTelemetry(available=True, reason=None, sampled_at=now,
                                driver_version=driver, gpus=gpus)


def node_gpu_count(nvml: ModuleType | None = None) -> int | None:
    """GPUs on this node as NVML sees them, or None without a driver (nothing to check).
    Quiet: a machine without GPUs is normal for `check`, and telemetry says so itself."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except (nvml.NVMLError, OSError):
        return None
    try:
        return int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
