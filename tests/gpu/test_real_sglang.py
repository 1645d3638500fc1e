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

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.gpu.sglang_job import (RealJob, build_model, in_flight, job_config,
                                  missing_for_gpu_test, nvml_problems, server, start_job)
from tests.gpu.tiny_qwen3 import THINK_CLOSE, THINK_OPEN, TinyModel

_why_not = missing_for_gpu_test()
pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(_why_not is not None, reason=_why_not or "")]

PROMPTS = 3000
RAISED_MAX_TOKENS = 64
BATCH = 40          # answers to see in each phase before moving on


def _first_max_tokens(model: TinyModel) -> int:
    """A limit that cuts every answer a few tokens after </think>: truncated in the answer,
    with content, so the quality gate has nothing to pause for."""
    return model.think_tokens + 4


def _db(directory: Path, sql: str, *args: object) -> list[tuple]:
    con = sqlite3.connect(f"file:{directory / 'job.db'}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


@pytest.mark.timeout(480)
def test_two_real_sglang_servers_under_the_daemon(tmp_path: Path):
    model = build_model(tmp_path)
    first = _first_max_tokens(model)
    assert model.expected(first).finish_reason == "length" and model.expected(first).content
    assert model.expected(RAISED_MAX_TOKENS).finish_reason == "stop"

    job = start_job(tmp_path, job_config(tmp_path, model, prompts=PROMPTS, max_tokens=first))
    try:
        _run_scenario(job, model, first)
    finally:
        job.stop()
    _check_output(tmp_path, model, first)


def _run_scenario(job: RealJob, model: TinyModel, first: int) -> None:
    # Hold dispatch while the servers load, so each phase below starts from a known point.
    job.wait(lambda s: True, "the control socket", timeout_s=60)
    job.ctl("pause", "gpu test: held until both servers are READY")
    s = job.wait(lambda s: bool(s["paused"]), "the pause", timeout_s=30)
    assert s["job"]["done"] == 0, "answers before the pause: SGLang was READY in seconds?"

    s = job.wait(lambda s: all(x["state"] == "READY" for x in s["servers"]),
                 "both servers READY", timeout_s=360)
    assert {x["name"] for x in s["servers"]} == {"gpu0", "gpu1"}

    # Phase 1: answers at the first limit.
    job.ctl("resume")
    job.wait(lambda s: s["job"]["done"] >= BATCH, f"{BATCH} answers", timeout_s=120)
    job.ctl("pause", "gpu test: raising max tokens")
    s = job.wait(lambda s: in_flight(s) == 0, "the requests in flight to finish", timeout_s=120)
    done_at_first = s["job"]["done"]
    assert done_at_first < PROMPTS, "the job finished before max tokens could be raised"

    # Phase 2: a live max-tokens change through the control socket's CLI.
    job.ctl("max-tokens", str(RAISED_MAX_TOKENS))
    s = job.wait(lambda s: s["max_tokens"] == RAISED_MAX_TOKENS, "the new max tokens", 30)
    job.ctl("resume")
    job.wait(lambda s: s["job"]["done"] >= done_at_first + BATCH,
             "answers at the raised limit", timeout_s=120)
    s = job.wait(lambda s: not nvml_problems(s), "NVML power, utilisation and energy",
                 timeout_s=30, explain=nvml_problems)

    # Phase 3: SIGKILL one server's whole process group (SGLang's scheduler and detokenizer
    # are its children), with requests likely in flight; the daemon must restart it.
    victim = server(s, "gpu1")
    pid = victim["pid"]
    assert pid and os.getpgid(pid) == pid, "each server runs in its own process group"
    restarts_before = victim["restarts"]
    os.killpg(pid, signal.SIGKILL)
    job.ctl("pause", "gpu test: gpu1 restarting")
    s = job.wait(lambda s: server(s, "gpu1")["state"] == "READY"
                 and server(s, "gpu1")["pid"] not in (None, pid),
                 "gpu1 restarted and READY", timeout_s=300)
    restarted = server(s, "gpu1")
    assert restarted["restarts"] > restarts_before
    reason = restarted["last_exit_reason"] or ""
    assert "SIGKILL" in reason or "signal 9" in reason, reason
    assert server(s, "gpu0")["state"] == "READY"
    assert s["job"]["failed"] == 0, "requests cut off by the kill must not fail"

    # Phase 4: the rest of the job on both servers; the daemon exits 0 when it is done.
    job.ctl("resume")
    try:
        code = job.proc.wait(timeout=240)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the job did not finish: {job.status()}\n{job.log_tail()}")
    assert code == 0, job.log_tail()


def _check_output(directory: Path, model: TinyModel, first: int) -> None:
    # Exactly once: every prompt id once across the shard files.
    ids = []
    lines = []
    for path in sorted((directory / "shards").rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            ids.append(obj["id"])
            lines.append(obj)
    assert len(ids) == PROMPTS and len(set(ids)) == PROMPTS
    assert sorted(ids) == [f"demo-{i:06d}" for i in range(PROMPTS)]

    # Every answer is exactly what SGLang's qwen3 parser makes of the planted output under
    # the limit it was sent with; both limits were used.
    by_limit: dict[int, int] = {}
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
        by_limit[limit] = by_limit.get(limit, 0) + 1
    assert set(by_limit) == {first, RAISED_MAX_TOKENS}, by_limit

    # The DB agrees: all done, none failed, both servers answered, and the restarted gpu1
    # answered after its second READY.
    assert _db(directory, "SELECT status, count(*) FROM prompts GROUP BY status") == \
        [("done", PROMPTS)]
    servers = dict(_db(directory, "SELECT server, count(*) FROM prompts GROUP BY server"))
    assert set(servers) == {"gpu0", "gpu1"}, servers
    ready = [t for (t,) in _db(directory, "SELECT time FROM events WHERE kind = 'server_state' "
                               "AND subject = 'gpu1' AND json_extract(detail, '$.to') = 'READY' "
                               "ORDER BY id")]
    assert len(ready) >= 2, ready
    after = _db(directory, "SELECT count(*) FROM prompts WHERE server = 'gpu1' AND "
                "finished_at > ?", ready[-1])[0][0]
    assert after > 0, "the restarted gpu1 answered nothing"
    changes = _db(directory, "SELECT json_extract(detail, '$.to') FROM events "
                  "WHERE kind = 'max_tokens'")
    assert (RAISED_MAX_TOKENS,) in changes, changes
