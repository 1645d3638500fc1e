"""The job's energy meter, fed from the GPU sampler's latest sample at each status tick and
carried across daemon restarts in the state DB (settings key `energy_joules`), so "kWh so
far" is the job's, not this process's."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from state.async_store import AsyncStore
from state.settings_keys import Setting
from state.store import Store
from supervisor.config import JobConfig
from supervisor.gpu.energy import EnergyMeter, EnergySnapshot

SAVE_EVERY_S = 30.0


class EnergyLedger:
    def __init__(self, astore: AsyncStore, meter: EnergyMeter) -> None:
        self.astore = astore
        self.meter = meter
        self._seen_at: float | None = None
        self._saved_at = time.monotonic()

    @classmethod
    async def open(cls, astore: AsyncStore, config: JobConfig) -> EnergyLedger:
        saved = await astore.call(Store.get_setting, Setting.ENERGY_JOULES)
        try:
            carried = float(saved) if saved else 0.0
        except ValueError:
            carried = 0.0            # a hand-edited value is not worth stopping the job for
        meter = EnergyMeter(config.quality.metrics_window_s, gpus=config.servers.gpu_list,
                            carried_joules=carried)
        return cls(astore, meter)

    async def update(self, telemetry: Any, *, window_tokens: float,
                     server_tokens: Mapping[str, float], server_gpus: Mapping[str, Any],
                     remaining_tokens: float | None, now: float) -> EnergySnapshot:
        sampled = getattr(telemetry, "sampled_at", None)
        if telemetry is not None and sampled != self._seen_at:
            self._seen_at = sampled
            self.meter.observe(telemetry)
        if time.monotonic() - self._saved_at >= SAVE_EVERY_S:
            await self.save()
        return self.meter.snapshot(window_tokens, server_tokens, server_gpus,
                                   remaining_tokens, now=now)

    async def save(self) -> None:
        self._saved_at = time.monotonic()
        await self.astore.call(Store.set_setting, Setting.ENERGY_JOULES, repr(self.meter.total_joules))
