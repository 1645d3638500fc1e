"""The simulator's throughput collapse (`--sim-fault collapse`, faults.py): the server stays up
but decodes `--sim-collapse-factor` times slower, and both what it reports (SGLang's
sglang:gen_throughput, decode_meter.py) and what its clients receive slow down together;
`none` brings the speed back. Requests in flight follow each change of speed and still
deliver their whole answer."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.sim.options import parse_options
from supervisor.sim.output_plan import natural_length, prompt_digest

# Tokens a second per request (time scale 1): a 16-token delta every 32 ms, slow enough that
# the server's own work between deltas (more on a busy machine) is a small part of it.
RATE = 500
SLOTS = 4
FACTOR = 10
MAX_TOKENS = 1600
WINDOW_S = 1.0


def _long_prompts(n: int) -> list[list[dict[str, str]]]:
    """Prompts whose natural answer outruns MAX_TOKENS (seed 0), so each decodes MAX_TOKENS."""
    out = []
    for i in range(1000):
        messages = [{"role": "user", "content": f"Tell the long story number {i}."}]
        if natural_length(prompt_digest(messages, 0)) > MAX_TOKENS:
            out.append(messages)
            if len(out) == n:
                return out
    raise AssertionError("not enough long prompts")


async def _gauge(client: httpx.AsyncClient, base_url: str) -> float:
    text = (await client.get(base_url + "/metrics", timeout=5)).text
    for family in text_string_to_metric_families(text):
        if family.name == "sglang:gen_throughput":
            return float(family.samples[0].value)
    raise AssertionError("no sglang:gen_throughput in /metrics")


async def test_a_collapse_slows_the_gauge_and_the_tokens_together_and_lifts(sim_server):
    sim = sim_server("--enable-metrics", "--max-running-requests", str(SLOTS),
                     "--sim-tokens-per-s", str(RATE), "--sim-collapse-factor", str(FACTOR))
    received = [0] * SLOTS                    # running completion tokens per stream
    ends: list[dict[str, Any]] = [{} for _ in range(SLOTS)]   # each stream's own end
    started = anyio.Event()

    async def stream(i: int, messages: list[dict[str, str]], client: httpx.AsyncClient) -> None:
        body = {"messages": messages, "max_tokens": MAX_TOKENS, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        async with client.stream("POST", sim.base_url + "/v1/chat/completions", json=body,
                                 timeout=60) as resp:
            async for line in resp.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[len("data: "):])
                if chunk["choices"] and chunk.get("usage"):
                    received[i] = chunk["usage"]["completion_tokens"]
                    if all(received):
                        started.set()
                if chunk["choices"] and chunk["choices"][0]["finish_reason"]:
                    ends[i]["finish"] = chunk["choices"][0]["finish_reason"]
                if not chunk["choices"]:
                    ends[i]["tokens"] = chunk["usage"]["completion_tokens"]

    async def window(client: httpx.AsyncClient) -> tuple[float, float]:
        """(the gauge, tokens the clients received a second) over about WINDOW_S (the gauge
        from the last tick, a read at least 40 decode steps after the one before)."""
        await _gauge(client, sim.base_url)
        t0, n0 = anyio.current_time(), sum(received)
        await anyio.sleep(WINDOW_S)
        gauge = await _gauge(client, sim.base_url)
        return gauge, (sum(received) - n0) / (anyio.current_time() - t0)

    async def fault(client: httpx.AsyncClient, name: str) -> None:
        (await client.post(sim.base_url + "/sim/fault", json={"fault": name},
                           timeout=5)).raise_for_status()

    async with httpx.AsyncClient(trust_env=False) as client:
        async with anyio.create_task_group() as tg:
            for i, messages in enumerate(_long_prompts(SLOTS)):
                tg.start_soon(stream, i, messages, client)
            with anyio.fail_after(30):
                await started.wait()
            # A first tick once all four decode (the one before spans the idle start).
            await anyio.sleep(0.2)
            await _gauge(client, sim.base_url)
            full_gauge, full_rate = await window(client)
            await fault(client, "collapse")
            slow_gauge, slow_rate = await window(client)
            state = (await client.get(sim.base_url + "/sim/state", timeout=5)).json()
            await fault(client, "none")
            back_gauge, _ = await window(client)

    # Full speed: at most SLOTS requests of RATE tokens a second (fewer while the server is
    # busy between deltas), and the clients receive what it generates.
    assert 0 < full_gauge <= 1.05 * SLOTS * RATE
    assert full_rate > 0.5 * full_gauge
    # Collapsed: the gauge and the tokens delivered fall by about the factor (a tenth).
    assert state["fault"] == "collapse" and state["decode_speed"] == pytest.approx(1 / FACTOR)
    assert 0 < slow_gauge < 0.25 * full_gauge
    assert 0 < slow_rate < 0.35 * full_rate
    # Lifted: back to speed, and every request delivered its whole answer.
    assert back_gauge > 0.5 * full_gauge
    assert [e.get("finish") for e in ends] == ["length"] * SLOTS
    assert [e.get("tokens") for e in ends] == [MAX_TOKENS] * SLOTS
    assert sim.log_text().count(f"Decode slowed to 1/{FACTOR} of its speed") == 1


def test_a_collapse_after_n_requests_and_its_factor_live(sim_server):
    sim = sim_server("--sim-instant", "--sim-fault", "collapse",
                     "--sim-fault-after-requests", "3")
    chat = {"messages": [{"role": "user", "content": "Hello."}], "max_tokens": 8}

    def state() -> dict[str, Any]:
        return httpx.get(sim.base_url + "/sim/state", timeout=5, trust_env=False).json()

    def fault(**body: Any) -> httpx.Response:
        return httpx.post(sim.base_url + "/sim/fault", json=body, timeout=5, trust_env=False)

    for _ in range(3):
        assert state()["fault"] == "none" and state()["decode_speed"] == 1.0
        httpx.post(sim.base_url + "/v1/chat/completions", json=chat, timeout=10,
                   trust_env=False).raise_for_status()
    for _ in range(100):                      # the trigger runs just after the answer
        if state()["fault"] == "collapse":
            break
        time.sleep(0.02)
    assert state()["decode_speed"] == pytest.approx(1 / 8)     # the default factor
    assert fault(collapse_factor=4).json()["collapse_factor"] == 4
    assert state()["decode_speed"] == pytest.approx(1 / 4)     # applied to the collapse
    bad = fault(collapse_factor=0.5)
    assert bad.status_code == 400 and "collapse_factor must be a number >= 1" in \
        bad.json()["message"]
    assert state()["decode_speed"] == pytest.approx(1 / 4)
    fault(fault="none").raise_for_status()
    assert state()["decode_speed"] == 1.0 and state()["fault"] == "none"


@pytest.mark.parametrize("flags, message", [
    (["--sim-collapse-factor", "0.5"], "--sim-collapse-factor must be >= 1"),
    (["--sim-error-share", "1.5"], "--sim-error-share must be within [0, 1]"),
])
def test_bad_collapse_and_error_flags_are_refused_in_one_line(flags, message):
    with pytest.raises(SystemExit, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_options(["--model-path", "m", *flags])
