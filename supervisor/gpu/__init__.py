"""GPU telemetry behind one small interface: NVML for real, a fake twin for tests."""

from __future__ import annotations

from supervisor.gpu.fake_source import FakeGpuSource
from supervisor.gpu.nvml_source import NvmlSource
from supervisor.gpu.sampler import GpuSampler
from supervisor.gpu.snapshot import GpuProcess, GpuSnapshot, GpuTelemetry
from supervisor.gpu.source import GpuSource

__all__ = ["FakeGpuSource", "GpuProcess", "GpuSampler", "GpuSnapshot", "GpuSource",
           "GpuTelemetry", "NvmlSource"]
