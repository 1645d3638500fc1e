"""Samples a GpuSource about once a second, off the event loop, and keeps the latest."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import anyio

from supervisor.gpu.snapshot import GpuTelemetry
from supervisor.gpu.source import GpuSource

log = logging.getLogger(__name__)


class GpuSampler:
    def __init__(self, source: GpuSource, interval_s: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.interval_s = interval_s
        self._clock = clock
        self._latest = GpuTelemetry.unavailable("not sampled yet")
        # One driver call at a time, on its own thread budget: a stuck driver call (it
        # happens on a GPU falling off the bus) must not eat the default thread pool.
        self._limiter = anyio.CapacityLimiter(1)

    @property
    def latest(self) -> GpuTelemetry:
        return self._latest

    async def sample_once(self) -> GpuTelemetry:
        try:
            snap = await anyio.to_thread.run_sync(self.source.sample, limiter=self._limiter)
        except Exception as exc:  # a daemon must not die of a telemetry bug
            log.exception("GPU telemetry sample failed")
            snap = GpuTelemetry.unavailable(f"telemetry error: {exc!r}", self._clock())
        self._latest = snap
        return snap

    async def run(self, samples: int | None = None) -> None:
        """Sample until cancelled (or `samples` times). The next sample is scheduled when the
        previous one finishes, so a slow driver slows sampling down instead of piling up."""
        count = math.inf if samples is None else samples
        taken = 0
        try:
            while taken < count:
                await self.sample_once()
                taken += 1
                if taken < count:
                    await anyio.sleep(self.interval_s)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.source.close, limiter=self._limiter)
