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
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

from supervisor.gpu.snapshot import GpuProcess, GpuSnapshot, GpuTelemetry
from supervisor.gpu.source import GpuSource
from supervisor.gpu.visible_devices import visible_devices

log = logging.getLogger(__name__)

T = TypeVar("T")

# NVML reports power in milliwatts; everything we publish is watts.
_MW_PER_W = 1000.0


def _text(value: Any) -> str:
    # Older bindings return bytes, newer ones str.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


_FROM_ENV: Any = object()


class NvmlSource(GpuSource):
    """`visible`: the daemon's CUDA_VISIBLE_DEVICES entries (read from the environment by
    default; None: the whole node). NVML numbers every GPU of the node whatever that variable
    says, while the config's GPUs (and so the servers' names and the status's GPU rows)
    index into the scheduler's list: with a list, exactly its devices are sampled, reported
    under their index in it, so "gpu0" is the server's own GPU, not another job's."""

    def __init__(
        self,
        nvml: ModuleType | None = None,
        retry_init_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        visible: Sequence[str] | None = _FROM_ENV,
    ) -> None:
        # `nvml` is injectable so tests drive this code with a fake driver module.
        self._nvml = nvml
        self._visible = visible_devices() if visible is _FROM_ENV else (
            None if visible is None else tuple(visible))
        # Each visible entry's NVML index, once found (the node's GPUs do not move).
        self._nvml_index: dict[str, int] = {}
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

    def _resolve(self, entry: str, count: int) -> int | None:
        """The NVML index of a CUDA_VISIBLE_DEVICES entry, or None when no GPU matches.
        An ordinal is read as NVML's index: the same GPU where CUDA_DEVICE_ORDER=PCI_BUS_ID
        or the node's GPUs are all one model (CUDA's default order puts faster boards
        first; between equals it keeps the PCI order NVML uses). A UUID may be shortened,
        as CUDA allows: the GPU whose UUID starts with it. A MIG instance's id matches no
        whole GPU: its row says so rather than show the parent board's figures as its own."""
        if entry in self._nvml_index:
            return self._nvml_index[entry]
        nvml = self._nvml
        assert nvml is not None
        found: int | None = None
        if entry.isdigit():
            found = int(entry) if int(entry) < count else None
        else:
            for i in range(count):
                try:
                    uuid = _text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))
                except nvml.NVMLError:
                    continue
                if uuid.startswith(entry):
                    found = i
                    break
        if found is not None:
            self._nvml_index[entry] = found
        return found

    def _device(self, index: int, at: int | None) -> GpuSnapshot:
        """GPU `index` as the job numbers it, read from NVML's index `at` (None when its
        CUDA_VISIBLE_DEVICES entry matches no GPU)."""
        nvml = self._nvml
        assert nvml is not None
        errors: list[str] = []
        if at is None:
            assert self._visible is not None
            return GpuSnapshot(index, None, None, None, None, None, None, None, None, None, None,
                               (), (f"handle: {self._visible[index]!r} of CUDA_VISIBLE_DEVICES "
                                    "matches no GPU NVML reports",))
        handle = self._metric("handle", errors, lambda: nvml.nvmlDeviceGetHandleByIndex(at))
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
            if self._visible is None:
                gpus = tuple(self._device(i, i) for i in range(count))
            else:
                gpus = tuple(self._device(i, self._resolve(entry, count))
                             for i, entry in enumerate(self._visible))
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
