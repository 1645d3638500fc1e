"""Batch-server behaviour: a slot limit that holds under load, latency that grows with the
output length, and output lengths with the heavy tail the daemon's truncation logic is for."""

from __future__ import annotations

import time

import anyio
import httpx

from supervisor.sim.output_plan import natural_length, plan_output, prompt_digest
from tests.fixtures.real_prompts import real_prompts


async def test_the_slot_limit_holds_under_load_and_the_rest_queue(sim_server):
    sim = sim_server("--max-running-requests", "4", "--sim-tokens-per-s", "400")
    async with httpx.AsyncClient(base_url=sim.base_url, trust_env=False, timeout=60) as client:
        async def one(i: int) -> None:
            r = await client.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": f"Question {i}"}], "max_tokens": 40,
                "separate_reasoning": True})
            assert r.status_code == 200

        async with anyio.create_task_group() as tg:
            for i in range(24):
                tg.start_soon(one, i)
        state = (await client.get("/sim/state")).json()
    assert state["peak_running"] == 4                 # never more than the limit...
    assert state["peak_queued"] >= 10                 # ...and the others waited their turn
    assert state["requests_total"] == 24 and state["running"] == state["queued"] == 0


async def test_latency_grows_with_output_length(sim_server):
    # 200 tokens/s per request: 20 tokens take >= 0.1 s, 300 tokens >= 1.5 s. Lower bounds
    # only: a slow machine can make a request later, never earlier.
    sim = sim_server("--sim-tokens-per-s", "200")
    async with httpx.AsyncClient(base_url=sim.base_url, trust_env=False, timeout=60) as client:
        took = {}
        for n in (20, 300):
            t0 = time.monotonic()
            r = await client.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "Explain entropy."}], "max_tokens": n})
            took[n] = time.monotonic() - t0
            assert r.json()["usage"]["completion_tokens"] == n
    assert took[300] >= 1.5 and took[300] > took[20]


async def test_time_scale_divides_every_duration(sim_server):
    sim = sim_server("--sim-tokens-per-s", "10", "--sim-time-scale", "1000")
    async with httpx.AsyncClient(base_url=sim.base_url, trust_env=False, timeout=60) as client:
        r = await client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Explain entropy."}], "max_tokens": 1000})
    # 1,000 tokens at 10 tokens/s is 100 simulated seconds: 0.1 s of wall time at x1000.
    assert r.json()["usage"]["completion_tokens"] == 1000


def _synthetic(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"Synthetic prompt number {i}: explain topic {i * 7}"}]
            for i in range(n)]


def test_truncation_share_at_4096_and_8192():
    lengths = [natural_length(prompt_digest(m, 0)) for m in _synthetic(20_000)]
    over_4k = sum(n > 4096 for n in lengths) / len(lengths)
    over_8k = sum(n > 8192 for n in lengths) / len(lengths)
    assert 0.16 <= over_4k <= 0.20                   # "about 18% exceed 4,096"
    assert 0.01 <= over_8k <= 0.05                   # "few exceed 8,192"
    # The same prompt always gets the same length; a different seed reshuffles.
    msgs = _synthetic(1)[0]
    assert natural_length(prompt_digest(msgs, 0)) == natural_length(prompt_digest(msgs, 0))
    assert any(natural_length(prompt_digest(m, 0)) != natural_length(prompt_digest(m, 1))
               for m in _synthetic(10))


async def test_real_prompts_truncate_at_about_the_same_share_over_http(sim_server):
    """The real-questions fixture through a real server at max_tokens 4,096."""
    rows = real_prompts()
    sim = sim_server("--sim-instant")
    finish = []
    async with httpx.AsyncClient(base_url=sim.base_url, trust_env=False, timeout=60) as client:
        for row in rows:
            r = await client.post("/v1/chat/completions", json={
                "messages": row["messages"], "max_tokens": 4096, "separate_reasoning": True})
            choice = r.json()["choices"][0]
            finish.append(choice["finish_reason"])
            if choice["finish_reason"] == "length":
                assert r.json()["usage"]["completion_tokens"] == 4096
    share = finish.count("length") / len(finish)
    # 48 prompts: a binomial at p=0.18 (sigma 0.055) lies within 0.02-0.35 at 3 sigma.
    assert 0.02 <= share <= 0.35, share


def test_plan_splits_thinking_then_answer():
    digest = prompt_digest([{"role": "user", "content": "x"}], 3)
    full = plan_output(digest, max_tokens=None, thinking=True, room=10**6)
    assert full.finish_reason == "stop" and full.thinking_finished
    assert full.reasoning_tokens + full.answer_tokens == full.completion_tokens
    cut = plan_output(digest, max_tokens=full.reasoning_tokens // 2, thinking=True, room=10**6)
    assert cut.finish_reason == "length" and cut.answer_tokens == 0
    assert not cut.thinking_finished


async def test_requests_within_the_limit_never_count_as_queued(sim_server):
    sim = sim_server("--max-running-requests", "8", "--sim-tokens-per-s", "400")
    async with httpx.AsyncClient(base_url=sim.base_url, trust_env=False, timeout=60) as client:
        async def one(i: int) -> None:
            await client.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": f"Q{i}"}], "max_tokens": 40})

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
        state = (await client.get("/sim/state")).json()
    assert state["peak_running"] == 8 and state["peak_queued"] == 0
