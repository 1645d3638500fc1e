"""Energy accounting: NVML's counter, power x time where it is missing, "unavailable" where
neither is; joules per token, kWh so far and projected, tokens per joule per server."""

from __future__ import annotations

import math

import pynvml

from supervisor.gpu import FakeGpuSource, NvmlSource
from supervisor.gpu.energy import COUNTER, J_PER_KWH, POWER, UNAVAILABLE, EnergyMeter
from supervisor.gpu.snapshot import GpuSnapshot, GpuTelemetry

from .fake_nvml import FakeNvml


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _run(source: FakeGpuSource, clock: Clock, meter: EnergyMeter, samples: int,
         step: float = 1.0) -> list[GpuTelemetry]:
    out = []
    for _ in range(samples):
        tel = source.sample()
        meter.observe(tel)
        out.append(tel)
        clock.t += step
    return out


def test_the_counter_is_taken_as_is():
    clock = Clock()
    source = FakeGpuSource(count=2, clock=clock)
    meter = EnergyMeter(window_s=60, clock=clock)
    tels = _run(source, clock, meter, 12)
    snap = meter.snapshot(window_tokens=0, now=tels[-1].sampled_at)
    for g in snap.gpus:
        first, last = tels[0].gpus[g.index].energy_j, tels[-1].gpus[g.index].energy_j
        assert g.source == COUNTER and math.isclose(g.joules, last - first)
    assert snap.available and snap.reason is None
    assert math.isclose(snap.kwh, sum(g.joules for g in snap.gpus) / J_PER_KWH)


def test_power_times_time_where_the_counter_is_missing():
    clock = Clock()
    source = FakeGpuSource(count=1, clock=clock, missing={"energy_j": "Not Supported"})
    meter = EnergyMeter(window_s=60, clock=clock)
    tels = _run(source, clock, meter, 8, step=0.5)
    powers = [t.gpus[0].power_w for t in tels]
    trapezoid = sum((a + b) / 2 * 0.5 for a, b in zip(powers, powers[1:]))
    g = meter.snapshot(window_tokens=0, now=tels[-1].sampled_at).gpus[0]
    assert g.source == POWER and math.isclose(g.joules, trapezoid)


def test_neither_counter_nor_power_is_unavailable_and_counts_nothing():
    clock = Clock()
    source = FakeGpuSource(count=1, clock=clock,
                           missing={"energy_j": "Not Supported", "power_w": "Not Supported"})
    meter = EnergyMeter(window_s=60, clock=clock)
    _run(source, clock, meter, 4)
    snap = meter.snapshot(window_tokens=1000, remaining_tokens=1e6)
    assert not snap.available and snap.reason == "no GPU reports energy or power"
    assert snap.gpus[0].source == UNAVAILABLE and snap.kwh == 0.0
    assert snap.joules_per_token is None and snap.projected_kwh is None
    no_driver = EnergyMeter(window_s=60, clock=clock)
    no_driver.observe(GpuTelemetry.unavailable("NVML Shared Library Not Found", clock.t))
    assert no_driver.snapshot(window_tokens=0).reason == "NVML Shared Library Not Found"


def test_a_counter_that_goes_back_counts_that_interval_by_power():
    def tel(t: float, energy: float, power: float) -> GpuTelemetry:
        g = GpuSnapshot(0, "x", "u", power, 700.0, 50.0, 10.0, 1, 2, 40.0, 1.0, energy_j=energy)
        return GpuTelemetry(True, None, t, "d", (g,))
    meter = EnergyMeter(window_s=60)
    meter.observe(tel(0.0, 5000.0, 100.0))
    meter.observe(tel(1.0, 5300.0, 300.0))      # counter: 300 J
    meter.observe(tel(2.0, 10.0, 300.0))        # driver reloaded: power, 300 J
    meter.observe(tel(3.0, 410.0, 500.0))       # counter again: 400 J
    assert meter.snapshot(window_tokens=0, now=3.0).gpus[0].joules == 1000.0


def test_joules_per_token_projection_and_tokens_per_joule_per_server():
    clock = Clock()
    source = FakeGpuSource(count=4, clock=clock)
    meter = EnergyMeter(window_s=10, gpus=[0, 1, 2], clock=clock)   # GPU 3 is not the job's
    tels = _run(source, clock, meter, 30)
    now = tels[-1].sampled_at
    snap = meter.snapshot(window_tokens=50_000, now=now, remaining_tokens=1e6,
                          server_tokens={"gpu0": 30_000, "gpu1-2": 20_000},
                          server_gpus={"gpu0": (0,), "gpu1-2": (1, 2)})
    assert [g.index for g in snap.gpus] == [0, 1, 2]
    # The window holds the last 10 s of counter only, not the whole run.
    for g in snap.gpus:
        energy = {t.sampled_at: t.gpus[g.index].energy_j for t in tels}
        assert math.isclose(g.window_joules, energy[now] - energy[now - 10])
        assert g.window_joules < g.joules
    window_j = sum(g.window_joules for g in snap.gpus)
    assert math.isclose(snap.joules_per_token, window_j / 50_000)
    total = sum(g.joules for g in snap.gpus)
    assert math.isclose(snap.projected_kwh, (total + 1e6 * window_j / 50_000) / J_PER_KWH)
    one, two = snap.servers
    assert one.server == "gpu0" and math.isclose(one.tokens_per_joule,
                                                 30_000 / snap.gpus[0].window_joules)
    assert math.isclose(two.window_joules, snap.gpus[1].window_joules + snap.gpus[2].window_joules)


def test_energy_from_a_previous_run_of_the_job_is_carried():
    clock = Clock()
    meter = EnergyMeter(window_s=10, carried_joules=3.6e6, clock=clock)
    _run(FakeGpuSource(count=1, clock=clock), clock, meter, 3)
    assert meter.snapshot(window_tokens=0).kwh > 1.0
    assert meter.total_joules > 3.6e6


def test_nvml_counter_is_read_in_joules_and_may_be_missing():
    g = NvmlSource(nvml=FakeNvml(count=1)).sample().gpus[0]  # type: ignore[arg-type]
    assert g.energy_j == 5_000_000.0
    nvml = FakeNvml(count=1, not_supported=frozenset({"energy"}))
    g = NvmlSource(nvml=nvml).sample().gpus[0]  # type: ignore[arg-type]
    assert g.energy_j is None and g.power_w == 412.345
    assert g.errors == (f"energy: {pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)}",)
