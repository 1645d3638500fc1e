"""The GPU test's scenario (tests/gpu/scenario.py) on the real SGLang 0.5.23 CPU server, for
every phase that needs no CUDA: two real servers through the same launch wrapper and the
same daemon shim, held until both are READY, answers at a first limit, a live max-tokens
change through the CLI, a SIGKILLed server restarted with its requests requeued, the rest of
the job, and the same account of it (exactly once, both limits, both servers, the restarted
one answering after its restart). Only NVML and the CUDA flags (graph capture) are left to
the GPU machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.real_sglang import (
    CPU_FLAG_VALUES,
    one_real_job_at_a_time,
    sglang_cpu_dir,
    whole_jobs_skipped,
)
from tests.gpu.scenario import check_job_account, run_scenario
from tests.gpu.sglang_job import SHARED_GPU, job_config, start_job

WHY_NOT = whole_jobs_skipped()
pytestmark = [pytest.mark.slow, pytest.mark.real_sglang, pytest.mark.timeout(3000)]
if WHY_NOT is not None:
    pytestmark.append(pytest.mark.skip(reason=f"real SGLang tier: {WHY_NOT}"))

# Fewer than the GPU's 400: a CPU server on a loaded 2-core machine decodes a few tokens a
# second per stream; the phases need only BATCH answers each and some left for the end.
PROMPTS = 200
FIRST_MAX_TOKENS = 17
CUDA_ONLY = ("cuda-graph-backend-decode", "cuda-graph-backend-prefill")


def test_the_gpu_scenario_runs_on_the_cpu_server(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    base = sglang_cpu_dir()
    data = job_config(tmp_path, base / "tiny", prompts=PROMPTS, max_tokens=FIRST_MAX_TOKENS)
    servers = data["servers"]
    # The launch wrapper execs the Python it runs under: SGLang's CPU venv.
    servers["command"] = [str(base / "venv" / "bin" / "python"), str(SHARED_GPU), "launch",
                          "-m", "sglang.launch_server"]
    flags = {k: v for k, v in servers["flags"].items() if k not in CUDA_ONLY}
    flags.update(CPU_FLAG_VALUES)
    flags["max-total-tokens"] = 4096          # the CPU build's pool, in tokens
    servers["flags"] = flags
    # A loaded 2-core machine: SGLang's start takes minutes, a decode step a while.
    servers.update({"startup_timeout_s": 600.0, "health_timeout_s": 30.0,
                    "hang_timeout_s": 300.0})
    # A random-weight model "thinks" noise: the quality gate would (rightly) stop the job.
    data["quality"] = {"max_thinking_truncated_rate": 1.0, "max_bad_rate": 1.0,
                       "max_truncation_rate": 1.0, "max_loop_rate": 1.0}
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")   # the servers inherit the daemon's env
    with one_real_job_at_a_time():
        job = start_job(tmp_path, data)
        try:
            run_scenario(job, prompts=PROMPTS, check_nvml=False, finish_timeout_s=900.0)
        finally:
            job.stop()
    check_job_account(tmp_path, prompts=PROMPTS, first=FIRST_MAX_TOKENS)
