"""The long-batch probe against a simulated SGLang server (a real child process on loopback):
a full batch that goes through (every answer decoded to the limit, counted for the waste
ledger), one the server dies under, and the bodies it sends."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from supervisor.config import GenerationSection
from supervisor.tune.long_batch import completion_tokens, probe_bodies, run_probe
from tests.fixtures.sim_servers import SimServer

LONG = [[{"role": "user", "content": "a long prompt " * 200}],
        [{"role": "user", "content": "a shorter one " * 50}]]
GEN = GenerationSection(enable_thinking=False)


def test_a_full_batch_cycles_the_longest_prompts_and_decodes_to_the_limit() -> None:
    bodies = probe_bodies(LONG, 5, "m", GEN, 64)
    assert len(bodies) == 5
    assert [b["messages"] for b in bodies] == [LONG[0], LONG[1], LONG[0], LONG[1], LONG[0]]
    assert all(b["ignore_eos"] and b["max_completion_tokens"] == 64 for b in bodies)
    assert probe_bodies([], 5, "m", GEN, 64) == [] and probe_bodies(LONG, 0, "m", GEN, 64) == []


async def test_a_healthy_server_takes_the_batch(sim_server: Callable[..., SimServer]) -> None:
    sim = sim_server("--max-running-requests", "4", "--sim-tokens-per-s", "400")
    async with httpx.AsyncClient(trust_env=False) as client:
        got = await run_probe(client, sim.base_url, probe_bodies(LONG, 4, "sim", GEN, 32),
                              30.0, lambda: None)
    assert got.failure is None
    assert (got.answered, got.tokens) == (4, 4 * 32)       # ignore_eos: each to the limit


async def test_a_server_that_dies_under_the_batch_fails_it(
        sim_server: Callable[..., SimServer]) -> None:
    sim = sim_server("--max-running-requests", "4", "--sim-tokens-per-s", "20",
                     "--sim-fault", "oom", "--sim-fault-after-s", "1.5")
    async with httpx.AsyncClient(trust_env=False) as client:
        got = await run_probe(client, sim.base_url, probe_bodies(LONG, 4, "sim", GEN, 64),
                              30.0, lambda: None)
    assert got.failure is not None and "of 4 failed" in got.failure
    assert got.answered < 4 and got.tokens == got.answered * 64


async def test_the_canary_leaving_ready_ends_the_probe(
        sim_server: Callable[..., SimServer]) -> None:
    sim = sim_server("--max-running-requests", "4", "--sim-tokens-per-s", "2")
    async with httpx.AsyncClient(trust_env=False) as client:
        got = await run_probe(client, sim.base_url, probe_bodies(LONG, 4, "sim", GEN, 500),
                              30.0, lambda: "backoff: oom")
    assert got.failure == "1 of 4 failed: backoff: oom" and got.answered == 0


def test_the_count_is_what_the_answer_says_and_nothing_from_garbage() -> None:
    def answer(body: object) -> httpx.Response:
        return httpx.Response(200, json=body) if not isinstance(body, bytes) \
            else httpx.Response(200, content=body)
    assert completion_tokens(answer({"usage": {"completion_tokens": 812}})) == 812
    for bad in ({"usage": None}, {"usage": {"completion_tokens": -1}}, {},
                {"usage": {"completion_tokens": True}}, b"not json", [1, 2]):
        assert completion_tokens(answer(bad)) == 0, bad
