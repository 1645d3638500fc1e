"""The daemon against real SGLang 0.5.23 on a GPU: two `python -m sglang.launch_server`
processes serving a tiny Qwen3 model built here (no download), run by `dflash-supervisor
run` as a real process and steered only through its CLI, as an operator would.

Checked, in one job:
- both servers become READY (real /health_generate);
- every answer is split by SGLang's qwen3 reasoning parser exactly as the planted model
  output predicts: reasoning_content, content and finish_reason per max_tokens, with no
  <think> markers left in the content;
- a live `dflash-supervisor ctl max-tokens N` reaches the servers: answers sent before it
  are cut at the old limit (in the answer), answers after it run to their stop token;
- a server whose whole process group is SIGKILLed is restarted by the daemon (new pid,
  READY again, SIGKILL as its exit reason) and serves again;
- exactly-once output: every prompt id once across the shard files, as many as prompts;
- `dflash-supervisor status --json` carries NVML's power, utilisation and energy read
  from the real driver.

Skipped unless CUDA, SGLang, torch, transformers and tokenizers are all here; see
tests/gpu/README.md for the one command and what the GPU machine needs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.scenario import RAISED_MAX_TOKENS, check_job_account, run_scenario
from tests.gpu.sglang_job import build_model, job_config, missing_for_gpu_test, start_job
from tests.gpu.tiny_qwen3 import THINK_CLOSE, THINK_OPEN, TinyModel

_why_not = missing_for_gpu_test()
pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(_why_not is not None, reason=_why_not or "")]

PROMPTS = 3000


def first_max_tokens(model: TinyModel) -> int:
    """A limit that cuts every answer a few tokens after </think>: truncated in the answer,
    with content, so the quality gate has nothing to pause for."""
    return model.think_tokens + 4


@pytest.mark.timeout(480)
def test_two_real_sglang_servers_under_the_daemon(tmp_path: Path):
    model = build_model(tmp_path)
    first = first_max_tokens(model)
    assert model.expected(first).finish_reason == "length" and model.expected(first).content
    assert model.expected(RAISED_MAX_TOKENS).finish_reason == "stop"

    config = job_config(tmp_path, model.path, prompts=PROMPTS, max_tokens=first)
    job = start_job(tmp_path, config)
    try:
        run_scenario(job, prompts=PROMPTS, check_nvml=True)
    finally:
        job.stop()
    lines = check_job_account(tmp_path, prompts=PROMPTS, first=first)

    # Every answer is exactly what SGLang's qwen3 parser makes of the planted output under
    # the limit it was sent with.
    for obj in lines:
        answer = obj["messages"][-1]
        assert answer["role"] == "assistant"
        limit = obj["max_tokens"]
        exp = model.expected(limit)
        got = (answer["reasoning_content"], answer["content"], obj["finish_reason"])
        assert got == (exp.reasoning_content, exp.content, exp.finish_reason), (obj["id"], limit)
        assert THINK_OPEN not in answer["content"] and THINK_CLOSE not in answer["content"]
        if exp.finish_reason == "length":
            assert obj["usage"]["completion_tokens"] == limit, obj["usage"]
