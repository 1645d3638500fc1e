"""The GPU test's scenario (scenario.py) on simulated SGLang servers, so it keeps working
where no GPU is: the same daemon (through the one-GPU shim), the same launch wrapper, the
same CLI steering, kill and restart, and the same account of the job. Only the answers'
exact text and NVML are left to the real test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.gpu.scenario import check_job_account, run_scenario
from tests.gpu.sglang_job import MODEL_DIR, SHARED_GPU, job_config, start_job

pytestmark = pytest.mark.slow

# Enough that the job cannot end between two of the scenario's steps on a loaded machine
# (each step runs the CLI: a second or more there), yet ends in well under a minute.
PROMPTS = 3000
FIRST_MAX_TOKENS = 17


@pytest.mark.timeout(400)
def test_the_gpu_scenario_runs_on_simulated_servers(tmp_path: Path):
    model = tmp_path / MODEL_DIR
    model.mkdir()
    data = job_config(tmp_path, model, prompts=PROMPTS, max_tokens=FIRST_MAX_TOKENS)
    data["servers"]["command"] = [sys.executable, str(SHARED_GPU), "launch",
                                  "-m", "supervisor.sim"]
    # 40 s of "loading" (the scenario pauses dispatch before the servers are READY, and on
    # a busy machine its status calls take seconds each); about 0.3 s a request, ~50 a
    # second in all: between a phase's wait and its pause (a status call and a ctl call,
    # each a process start) a loaded CI machine let 0.1 s requests run 18 s, and the job of
    # 3,000 was all but done before gpu1's kill.
    data["servers"]["flags"].update({"sim-startup-s": 200, "sim-time-scale": 5.0,
                                     "sim-tokens-per-s": 50})
    # The simulator thinks at length: these limits cut it inside the thinking, which the
    # quality gate would (rightly) pause for. The tiny model on real SGLang does not.
    data["quality"] = {"max_thinking_truncated_rate": 1.0, "max_bad_rate": 1.0}
    job = start_job(tmp_path, data)
    try:
        run_scenario(job, prompts=PROMPTS, check_nvml=False)
    finally:
        job.stop()
    lines = check_job_account(tmp_path, prompts=PROMPTS, first=FIRST_MAX_TOKENS)
    assert all(obj["model"] == MODEL_DIR for obj in lines)
