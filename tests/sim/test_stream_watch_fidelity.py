"""The simulator's streamed chat completions, as the dispatcher watches them: running usage
on each chunk, an abort by request id ending the stream as SGLang 0.5.23 ends it, and a
request stuck halfway (the per-request stall share). Each fact names the SGLang file it
comes from; the simulator is a real process on loopback."""

from __future__ import annotations

import json

import anyio
import httpx

MODEL = "sim/test-model"


def _body(content: str, rid: str, **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "rid": rid,
            "stream": True, "max_completion_tokens": 2000, "separate_reasoning": True,
            "chat_template_kwargs": {"enable_thinking": True}, **extra}


def _events(text: str) -> list[dict | str]:
    out: list[dict | str] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            payload = line[6:]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_continuous_usage_stats_puts_the_running_usage_on_each_text_chunk(sim_server):
    """sglang/srt/entrypoints/openai/serving_chat.py _generate_stream_content: with
    stream_options.continuous_usage_stats each reasoning or content chunk carries the usage
    so far (calculate_token_usage: prompt, completion and reasoning tokens); the finish chunk
    carries none; include_usage still sends the whole usage last, with "choices": []."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    body = _body("Describe a lighthouse.", "cu-1", stream_options={
        "include_usage": True, "continuous_usage_stats": True})
    r = httpx.post(sim.base_url + "/v1/chat/completions", json=body, timeout=30,
                   trust_env=False)
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    final = events[-2]
    assert isinstance(final, dict) and final["choices"] == []
    texts = [e for e in events[:-2] if isinstance(e, dict) and e["choices"]
             and (e["choices"][0]["delta"].get("content")
                  or e["choices"][0]["delta"].get("reasoning_content"))]
    running = [e["usage"]["completion_tokens"] for e in texts]
    assert len(running) > 2 and running == sorted(running) and running[0] > 0
    assert running[-1] == final["usage"]["completion_tokens"]
    assert all(e["usage"]["prompt_tokens"] == final["usage"]["prompt_tokens"] for e in texts)
    finish = [e for e in events if isinstance(e, dict) and e["choices"]
              and e["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and "usage" not in finish[0]
    # Without the option no chunk but the last carries a usage.
    plain = _events(httpx.post(sim.base_url + "/v1/chat/completions",
                               json=_body("Describe a lighthouse.", "cu-2",
                                          stream_options={"include_usage": True}),
                               timeout=30, trust_env=False).text)
    assert [e for e in plain[:-2] if isinstance(e, dict) and "usage" in e] == []


async def _until_quiet(lines: list[str], quiet_s: float) -> None:
    """Until the reader has had some lines and then none for `quiet_s` (bounded by the
    caller's scope). The reads themselves are never cancelled: that would close the stream,
    which frees the request on the server too."""
    while True:
        n = len(lines)
        await anyio.sleep(quiet_s)
        if n and len(lines) == n:
            return


async def test_a_stuck_request_streams_half_then_waits_for_its_abort(sim_server):
    """sglang/srt/managers/tokenizer_manager.py abort_request and serving_chat.py: a
    request aborted by rid ends its stream with a finish chunk of finish_reason "abort"
    (no status code: the normal finish path), then the usage of what it produced, then
    [DONE]. The simulator's stall share (not SGLang) sticks the prompt's first request
    halfway; its retry, under a new rid, completes."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3", "--sim-stall-share", "1")
    prompt = "Tell the history of the compass."
    opts = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    lines: list[str] = []
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        with anyio.fail_after(60):
            async with client.stream("POST", sim.base_url + "/v1/chat/completions",
                                     json=_body(prompt, "stuck-1", **opts)) as resp:
                async def read() -> None:
                    async for line in resp.aiter_lines():
                        lines.append(line)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(read)
                    await _until_quiet(lines, 1.0)
                    state = (await client.get(sim.base_url + "/sim/state")).json()
                    assert state["running"] == 1            # held, not finished
                    assert "data: [DONE]" not in lines
                    r = await client.post(sim.base_url + "/abort_request",
                                          json={"rid": "stuck-1", "abort_all": False})
                    assert r.status_code == 200
            retry = await client.post(sim.base_url + "/v1/chat/completions",
                                      json=_body(prompt, "stuck-2", **opts))
            state = (await client.get(sim.base_url + "/sim/state")).json()
    events = _events("\n".join(lines))
    assert events[-1] == "[DONE]"
    finish = [e for e in events if isinstance(e, dict) and e["choices"]
              and e["choices"][0]["finish_reason"]]
    assert [e["choices"][0]["finish_reason"] for e in finish] == ["abort"]
    cut = events[-2]["usage"]["completion_tokens"]
    whole = _events(retry.text)
    done = [e for e in whole if isinstance(e, dict) and e["choices"]
            and e["choices"][0]["finish_reason"]]
    assert done[0]["choices"][0]["finish_reason"] in ("stop", "length")
    assert 0 < cut < whole[-2]["usage"]["completion_tokens"]
    assert state["aborted_rids"] == ["stuck-1"] and state["running"] == 0


def test_stall_share_is_set_and_checked_at_runtime(sim_server):
    sim = sim_server("--sim-instant")
    ok = httpx.post(sim.base_url + "/sim/fault", json={"stall_share": 0.25}, timeout=10,
                    trust_env=False)
    assert ok.status_code == 200 and ok.json()["stall_share"] == 0.25
    bad = httpx.post(sim.base_url + "/sim/fault", json={"stall_share": 2}, timeout=10,
                     trust_env=False)
    assert bad.status_code == 400 and "stall_share" in bad.text
