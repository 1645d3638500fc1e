"""NVML through the whole daemon on a GPU machine, without SGLang: `dflash-supervisor run`
(a real process) on one simulated server, and `dflash-supervisor status --json` carrying
the real driver's power, utilisation, memory and energy counter, and the job's energy so
far. The part of the real-SGLang test that needs only a GPU and the project itself.

Skipped where NVML reports no GPU (CI, any machine without an NVIDIA driver)."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.gpu.nvml_source import node_gpu_count
from tests.fixtures.job_toml import job_data
from tests.gpu.sglang_job import nvml_problems, start_job

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not node_gpu_count(), reason="no NVIDIA GPU (NVML reports none)")]


def test_status_json_carries_nvml_power_utilisation_and_energy(tmp_path: Path):
    # A job that outlasts the test on GPU 0: 20,000 simulated prompts of about 1 s each.
    data = job_data(tmp_path, servers=1, prompts=20_000, flags={"sim-time-scale": 5.0})
    job = start_job(tmp_path, data, shared_gpu=False)
    try:
        job.wait(lambda s: s["job"]["done"] > 0, "a first answer", timeout_s=60)
        s = job.wait(lambda s: not nvml_problems(s), "NVML power, utilisation and energy",
                     timeout_s=60, explain=nvml_problems)
        assert [g["server"] for g in s["gpus"]["gpus"] if g["index"] == 0] == ["gpu0"]
    finally:
        job.stop()
    assert job.proc.returncode == 0, job.log_tail()
