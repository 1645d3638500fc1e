"""A stand-in for the `pynvml` module: the real exception classes and constants, fake devices."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml


class FakeNvml:
    NVMLError = pynvml.NVMLError
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM

    def __init__(self, count: int = 2, init_error: int | None = None,
                 not_supported: frozenset[str] = frozenset()) -> None:
        self.count = count
        self.init_error = init_error
        self.not_supported = not_supported
        self.init_calls = 0
        self.shutdown_calls = 0
        self.energy_mj = 5_000_000_000      # the driver has been up a while

    def _check(self, name: str) -> None:
        if name in self.not_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i >= self.count:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._check("power")
        return 412_345  # milliwatts

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        self._check("power_limit")
        return 700_000

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        self._check("utilization")
        return SimpleNamespace(gpu=97, memory=41)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        self._check("memory")
        return SimpleNamespace(total=150_000_000_000, used=120_000_000_000, free=30_000_000_000)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        self._check("temperature")
        return 61

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        assert kind == pynvml.NVML_CLOCK_SM
        self._check("sm_clock")
        return 1980

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self._check("energy")
        return self.energy_mj + h

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        self._check("processes")
        return [SimpleNamespace(pid=1000 + h, usedGpuMemory=100_000_000_000),
                SimpleNamespace(pid=4242, usedGpuMemory=None)]
