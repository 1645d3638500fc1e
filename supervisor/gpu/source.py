"""The one small interface every GPU telemetry backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod

from supervisor.gpu.snapshot import GpuTelemetry


class GpuSource(ABC):
    """A synchronous sampler. `sample` may block on the driver for milliseconds, so async code
    calls it from a worker thread (see GpuSampler), never on the event loop."""

    @abstractmethod
    def sample(self) -> GpuTelemetry:
        """Every GPU now; never raises for driver trouble (it becomes `unavailable`/None)."""

    def close(self) -> None:  # noqa: B027 - optional: most sources hold no driver
        """Release the driver; safe to call twice."""
