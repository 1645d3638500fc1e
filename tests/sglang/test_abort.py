"""Aborting one request by its id (supervisor/sglang/abort.py), on a real simulated SGLang
server over loopback: the chat completion posted as the dispatch path posts it
(chat_request.py), held halfway by the simulator, stopped by name."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import anyio
import httpx

from supervisor.config import GenerationSection
from supervisor.sglang.abort import AbortAnswer, abort_request
from supervisor.sglang.chat_request import post_chat, request_body
from tests.fixtures.ports import free_port

RID = "p1#1#0000000000000001"


def _events(text: str) -> list[Any]:
    return [line[len("data: "):] if line == "data: [DONE]" else json.loads(line[len("data: "):])
            for line in text.splitlines() if line.startswith("data: ")]


async def test_an_abort_stops_the_request_it_names_and_the_server_takes_it(sim_server) -> None:
    # The stall share holds every request halfway until it is aborted (the simulator's
    # fault, not SGLang's), so the abort surely meets it in flight.
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3", "--sim-stall-share", "1")
    body = json.dumps(request_body("m", [{"role": "user", "content": "Tell of the compass."}],
                                   GenerationSection(), 200, rid=RID)).encode()
    async with aiohttp.ClientSession() as session, \
            httpx.AsyncClient(trust_env=False) as client:
        with anyio.fail_after(60):
            async with post_chat(session, sim.base_url, body,
                                 aiohttp.ClientTimeout(total=60)) as resp:
                assert resp.status == 200
                assert await resp.content.readline()           # the stream has begun
                # A shorter id would abort this request too (SGLang matches by prefix):
                # only an id of another request is named before it.
                other = await abort_request(client, sim.base_url, "q9#1#0000000000000001")
                told = await abort_request(client, sim.base_url, RID)
                rest = (await resp.read()).decode()
            state = (await client.get(sim.base_url + "/sim/state")).json()
    assert other == AbortAnswer(200) and told == AbortAnswer(200) and told.taken
    events = _events(rest)
    assert events[-1] == "[DONE]"
    finish = [e["choices"][0]["finish_reason"] for e in events
              if isinstance(e, dict) and e.get("choices") and e["choices"][0]["finish_reason"]]
    assert finish == ["abort"]
    assert state["aborted_rids"] == [RID] and state["running"] == 0


async def test_a_server_that_is_not_there_is_an_answer_not_an_exception() -> None:
    url = f"http://127.0.0.1:{free_port()}"          # nothing listens there
    async with httpx.AsyncClient(trust_env=False) as client:
        told = await abort_request(client, url, RID, timeout_s=5.0)
    assert told.status is None and not told.taken
    assert told.error.startswith("ConnectError")
