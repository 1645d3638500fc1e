from __future__ import annotations

import json
import subprocess
import sys

import anyio
import pynvml

from supervisor.gpu import FakeGpuSource, GpuSampler, NvmlSource

from .fake_nvml import FakeNvml


def test_units_are_watts_bytes_celsius_mhz() -> None:
    snap = NvmlSource(nvml=FakeNvml(count=2)).sample()  # type: ignore[arg-type]
    assert snap.available and snap.reason is None
    assert snap.driver_version == "550.54.15"
    g = snap.gpus[1]
    assert g.name == "NVIDIA H200" and g.uuid == "GPU-1"
    assert g.power_w == 412.345 and g.power_limit_w == 700.0
    assert g.utilization_pct == 97.0 and g.memory_utilization_pct == 41.0
    assert g.memory_used_bytes == 120_000_000_000 and g.memory_total_bytes == 150_000_000_000
    assert g.temperature_c == 61.0 and g.sm_clock_mhz == 1980.0
    assert g.errors == ()
    # Memory by pid sums over GPUs and skips processes the driver cannot attribute.
    assert snap.memory_by_pid() == {1000: 100_000_000_000, 1001: 100_000_000_000}


def test_unsupported_metric_is_none_not_a_crash() -> None:
    nvml = FakeNvml(count=1, not_supported=frozenset({"sm_clock", "power", "processes"}))
    g = NvmlSource(nvml=nvml).sample().gpus[0]  # type: ignore[arg-type]
    assert g.sm_clock_mhz is None and g.power_w is None and g.processes == ()
    assert g.power_limit_w == 700.0 and g.temperature_c == 61.0
    assert sorted(e.split(":")[0] for e in g.errors) == ["power", "processes", "sm_clock"]
    assert all("Not Supported" in e for e in g.errors)


def test_no_driver_is_unavailable_with_reason_and_retried_later() -> None:
    now = [100.0]
    nvml = FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    source = NvmlSource(nvml=nvml, retry_init_s=30.0, clock=lambda: now[0])  # type: ignore[arg-type]
    snap = source.sample()
    assert not snap.available and snap.gpus == ()
    assert snap.reason is not None and "Driver Not Loaded" in snap.reason
    source.sample()
    assert nvml.init_calls == 1  # not hammering a missing driver every second
    now[0] += 31
    nvml.init_error = None  # the driver came back
    assert source.sample().available
    assert nvml.init_calls == 2
    source.close()
    source.close()
    assert nvml.shutdown_calls == 1


def test_real_nvml_on_this_machine_never_raises() -> None:
    # No GPU here: unavailable with a reason. On a GPU machine: available. Never a crash.
    snap = NvmlSource().sample()
    assert snap.available or snap.reason


async def test_sampler_runs_off_the_loop_and_closes_the_source() -> None:
    source = FakeGpuSource(count=2, processes=lambda: {0: {123: 5}})
    sampler = GpuSampler(source, interval_s=0.01)
    assert not sampler.latest.available
    with anyio.fail_after(10):
        await sampler.run(samples=3)
    assert source.samples == 3 and source.closed
    assert sampler.latest.available and sampler.latest.memory_by_pid() == {123: 5}


async def test_sampler_survives_a_broken_source() -> None:
    class Broken(FakeGpuSource):
        def sample(self):  # type: ignore[override]
            raise RuntimeError("boom")

    sampler = GpuSampler(Broken())
    snap = await sampler.sample_once()
    assert not snap.available and "boom" in (snap.reason or "")


def test_fake_missing_metric_and_unavailable() -> None:
    snap = FakeGpuSource(count=1, missing={"sm_clock_mhz": "Not Supported"}).sample()
    assert snap.gpus[0].sm_clock_mhz is None and snap.gpus[0].errors == ("sm_clock_mhz: Not Supported",)
    assert FakeGpuSource(unavailable="no driver").sample().reason == "no driver"


def test_module_script_prints_json_lines() -> None:
    out = subprocess.run([sys.executable, "-m", "supervisor.gpu", "-n", "2", "--interval", "0",
                          "--fake"], capture_output=True, text=True, timeout=60, check=True)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 2 and lines[0]["available"] and len(lines[0]["gpus"]) == 8
