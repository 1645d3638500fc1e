"""Issue 38 item 3 on real SGLang 0.5.23 (the CPU build, a tiny model): a job at max tokens
32, raised to 64 with continue through the control action. Each continued answer's ids are
its stored 32 followed by the continuation's; greedy (temperature 0), they equal a
from-scratch 64-token run of the same prompt -- where they differ the test prints the top-2
logprob gap at the first difference and fails unless it is a near tie (< 1e-3); the
stitched text equals decoding the ids; every prompt is in the shards once.

One real server, 40 prompts of at most 64 tokens (the tier's whole-job rules:
tests/fixtures/real_sglang.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from state.token_ids_table import unpack_ids
from supervisor.contract.actions import MaxTokensRequest
from supervisor.contract.pause_sources import PauseSource
from supervisor.control.actions import Actions
from supervisor.job.main_loop import Job
from tests.fixtures.real_job import expected_ids, query, run_job, shard_ids, wait_fleet, wait_for
from tests.fixtures.real_sglang import (
    CPU_FLAGS,
    one_real_job_at_a_time,
    start_real_sglang,
    whole_jobs_skipped,
)
from tests.real_sglang.test_daemon_on_sglang import CPU_ENV, real_config

pytestmark = [pytest.mark.slow, pytest.mark.real_sglang, pytest.mark.timeout(3000)]

WHY_NOT = whole_jobs_skipped()
if WHY_NOT is not None:
    pytestmark.append(pytest.mark.skip(reason=f"real SGLang tier: {WHY_NOT}"))

PROMPTS, OLD, NEW = 40, 32, 64
NEAR_TIE = 1e-3
IDS = {"x-sglext-return-input-ids": "1", "x-sglext-return-output-ids": "1"}


def _from_scratch(port: int, model: str, messages: list[dict], limit: int) -> dict[str, Any]:
    """The same prompt at `limit` in one greedy run, its ids and its top-2 logprobs."""
    r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers=IDS, timeout=600,
                   trust_env=False, json={
                       "model": model, "messages": messages, "max_tokens": limit,
                       "temperature": 0, "chat_template_kwargs": {"enable_thinking": False},
                       "logprobs": True, "top_logprobs": 2})
    assert r.status_code == 200, r.text
    return r.json()


def _detokenize(port: int, ids: list[int]) -> str:
    r = httpx.post(f"http://127.0.0.1:{port}/detokenize", json={"tokens": ids}, timeout=60,
                   trust_env=False)
    assert r.status_code == 200, r.text
    return r.json()["text"]


def _check_one(port: int, model: str, messages: list[dict], stored: tuple[int, ...],
               ids: tuple[int, ...], content: str) -> str:
    """One continued answer against its stored part and a from-scratch run; a line saying
    what was seen."""
    assert ids[:OLD] == stored, "the continued answer does not start with its stored ids"
    text = _detokenize(port, list(ids))
    assert content == text, "the stitched text is not the decoding of the ids"
    one_go = _from_scratch(port, model, messages, len(ids))
    whole = one_go["sglext"]["output_ids"][0]
    if list(ids) == whole:
        return "equal"
    at = next((i for i, (a, b) in enumerate(zip(ids, whole)) if a != b), min(len(ids),
                                                                               len(whole)))
    top = one_go["choices"][0]["logprobs"]["content"][at]["top_logprobs"]
    gap = top[0]["logprob"] - top[1]["logprob"]
    line = (f"differs first at token {at} ({ids[at] if at < len(ids) else None} vs "
            f"{whole[at] if at < len(whole) else None}): top-2 logprob gap {gap:.2e}")
    print(line)
    assert at >= OLD and gap < NEAR_TIE, line
    return line


async def test_a_job_raised_from_32_to_64_with_continue_matches_greedy_runs(
        tmp_path: Path) -> None:
    cfg = real_config(tmp_path / "job", prompts=PROMPTS, max_tokens=OLD, count=1)
    cfg = replace(cfg, generation=replace(cfg.generation, temperature=0.0),
                  job=replace(cfg.job, keep_token_ids="all"))
    seen: dict[str, Any] = {}

    async def drive(job: Job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: str(fleet.servers["gpu0"].state) == "READY",
                       "the real server READY", timeout_s=900)
        await wait_for(lambda: query(cfg, "SELECT count(*) FROM prompts WHERE status = "
                                          "'done' AND finish_reason = 'length'")[0][0] >= 4,
                       "4 truncated answers", 900, poll_s=0.5)
        assert job.dispatcher is not None
        dispatcher = job.dispatcher
        await dispatcher.pause(PauseSource.OPERATOR, "test: raise max tokens", "test")
        await wait_for(lambda: dispatcher.snapshot().in_flight == 0, "nothing in flight",
                       600, poll_s=0.2)
        seen["stored"] = {pid: unpack_ids(blob) for pid, blob in query(
            cfg, "SELECT t.prompt_id, t.output_ids FROM answer_tokens t JOIN prompts p ON "
                 "p.id = t.prompt_id WHERE p.finish_reason = 'length'")}
        # The control socket's own action (what `ctl max-tokens 64 --continue-truncated`
        # calls), in-process: its checks, the raise and the continue.
        actions = Actions(job, dispatcher.astore, job.task_group)
        seen["result"] = await actions.max_tokens(
            MaxTokensRequest(value=NEW, continue_truncated=True), None)
        await dispatcher.resume(PauseSource.OPERATOR, "test")

    with one_real_job_at_a_time():
        _, result = await run_job(cfg, drive, timeout_s=2700, base_env=CPU_ENV)
        # Each prompt once in the shards (a continuation is an attempt of its own, so not
        # assert_every_prompt_once's one attempt each).
        assert result.finished, result.reason
        assert sorted(shard_ids(cfg)) == expected_ids(PROMPTS)
        stored = seen["stored"]
        assert stored and all(len(ids) == OLD for ids in stored.values())
        assert seen["result"].continued == len(stored) and seen["result"].from_scratch == 0
        # The from-scratch runs on a server of the same flags, once the job is over.
        server = start_real_sglang(tmp_path / "one-go.log", *_flags(cfg.servers.flags))
        try:
            lines = []
            for pid, before in stored.items():
                ((messages, content, continued_from),) = query(
                    cfg, "SELECT messages, content, continued_from FROM prompts WHERE id = ?",
                    pid)
                assert continued_from == OLD
                (blob,) = query(cfg, "SELECT output_ids FROM answer_tokens WHERE prompt_id = ?",
                                pid)[0]
                lines.append(await anyio.to_thread.run_sync(
                    lambda: _check_one(server.port, server.model, json.loads(messages), before,
                                       unpack_ids(blob), content)))
        finally:
            server.stop()
    print(f"continued answers vs greedy from-scratch runs: {lines}")


def _flags(flags: dict[str, Any]) -> list[str]:
    """The job's server flags less the CPU ones start_real_sglang adds itself."""
    out: list[str] = []
    for name, value in flags.items():
        if f"--{name}" in CPU_FLAGS:
            continue
        out += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return out
