"""Streamed chat completions as SGLang 0.5.23 sends them: chunk shapes, the usage chunk,
errors before the stream (plain JSON) and after it began: a request the scheduler aborts
with an error status mid-decode (`--sim-error-share`, faults.py) ends its stream with
SGLang's error chunk; unstreamed it is a 500 with SGLang's error body.

Part of the simulator's fidelity tests (test_sglang_fidelity_*.py): each test is one fact
read from SGLang 0.5.23's own source, naming the file (path under `sglang/`); every test
runs the real simulator process (`python -m supervisor.sim`) on loopback."""

from __future__ import annotations

import json
from typing import Any

import httpx

from supervisor.sim.chat_completion import SCHEDULER_OOM_ABORT
from tests.fixtures.sim_servers import SimServer
from tests.sim.sglang_calls import THINK, chat, families, get

# `sglang/srt/managers/schedule_batch.py` retract_decode: the last request of a decode batch
# still out of memory after retracting all the others is aborted with
# status_code=HTTPStatus.INTERNAL_SERVER_ERROR and this message.
OOM_MESSAGE = ("Out of memory even after retracting all other requests in the decode batch. "
               "Aborting the last request.")


def _long_chat(i: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": f"Write at length about subject {i}."}],
        "max_tokens": 600, "separate_reasoning": True}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True,
                                                 "continuous_usage_stats": True})
    return body


def _events(sim: SimServer, body: dict[str, Any]) -> list[Any]:
    """The stream's data lines, parsed ("[DONE]" kept as the string)."""
    out: list[Any] = []
    with httpx.stream("POST", sim.base_url + "/v1/chat/completions", json=body, timeout=30,
                      trust_env=False) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("data: "):
                payload = line[len("data: "):]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_the_message_is_sglangs():
    assert SCHEDULER_OOM_ABORT == OOM_MESSAGE


def test_an_error_abort_mid_stream_sends_sglangs_error_chunk_then_usage_then_done(sim_server):
    sim = sim_server("--sim-tokens-per-s", "20000", "--reasoning-parser", "qwen3",
                     "--sim-error-share", "1")
    events = _events(sim, _long_chat(1, stream=True))
    # `sglang/srt/entrypoints/openai/serving_chat.py` _generate_chat_stream: an abort whose
    # finish_reason carries an HTTPStatus yields create_streaming_error_response(message,
    # code.name, code.value) (`serving_base.py`: json.dumps({"error": ErrorResponse}) with
    # object "error", type, param None, code), breaks out before any finish chunk, then
    # still sends the include_usage chunk and "data: [DONE]".
    error = {"error": {"object": "error", "message": OOM_MESSAGE,
                       "type": "INTERNAL_SERVER_ERROR", "param": None, "code": 500}}
    assert events.count(error) == 1
    at = events.index(error)
    before, after = events[:at], events[at + 1:]
    assert before[0]["choices"][0]["delta"] == {"reasoning_content": None,
                                                "role": "assistant", "content": ""}
    texts = [e for e in before[1:] if e["choices"][0]["delta"].get("content")
             or e["choices"][0]["delta"].get("reasoning_content")]
    assert texts and len(texts) == len(before) - 1      # text went out before the error
    assert all(e["choices"][0]["finish_reason"] is None for e in before)
    assert after[-1] == "[DONE]" and len(after) == 2
    usage = after[0]
    assert usage["choices"] == []
    # The usage counts what was generated before the abort: the last running count.
    assert usage["usage"]["completion_tokens"] == texts[-1]["usage"]["completion_tokens"] > 0


def test_a_coalesced_stream_still_sends_text_before_the_error_chunk(sim_server):
    sim = sim_server("--sim-tokens-per-s", "20000", "--sim-stream-step", "0",
                     "--sim-error-share", "1")
    events = _events(sim, _long_chat(4, stream=True))
    at = next(i for i, e in enumerate(events) if isinstance(e, dict) and "error" in e)
    assert events[at]["error"]["code"] == 500
    assert any(e["choices"][0]["delta"].get("content") for e in events[1:at])


def test_the_retry_of_an_aborted_prompt_completes_with_the_whole_answer(sim_server):
    sim = sim_server("--sim-tokens-per-s", "20000", "--reasoning-parser", "qwen3",
                     "--sim-error-share", "1")
    first = _events(sim, _long_chat(2, stream=True))
    again = _events(sim, _long_chat(2, stream=True))
    assert any("error" in e for e in first if isinstance(e, dict))
    assert not any("error" in e for e in again if isinstance(e, dict))
    finish = [e["choices"][0]["finish_reason"] for e in again
              if isinstance(e, dict) and e["choices"]]
    assert finish[-1] in ("stop", "length")
    # The text streamed before the error is the start of the whole answer.
    def text(events: list[Any]) -> str:
        deltas = [e["choices"][0]["delta"] for e in events
                  if isinstance(e, dict) and e.get("choices")]
        return "".join((d.get("reasoning_content") or "") + (d.get("content") or "")
                       for d in deltas)
    assert text(again).startswith(text(first)) and len(text(again)) > len(text(first))


def test_unstreamed_the_same_abort_is_a_500_with_sglangs_error_body(sim_server):
    sim = sim_server("--sim-tokens-per-s", "20000", "--sim-error-share", "1")
    resp = httpx.post(sim.base_url + "/v1/chat/completions", json=_long_chat(3, stream=False),
                      timeout=30, trust_env=False)
    # `sglang/srt/managers/tokenizer_manager.py` _handle_abort_finish_reason raises
    # HTTPException(status_code, detail=message) for a non-streamed request;
    # `serving_base.py` handle_request answers create_error_response(e.detail,
    # err_type=str(e.status_code), status_code=e.status_code).
    assert resp.status_code == 500
    assert resp.json() == {"object": "error", "message": OOM_MESSAGE, "type": "500",
                           "param": None, "code": 500}
    retry = httpx.post(sim.base_url + "/v1/chat/completions", json=_long_chat(3, stream=False),
                       timeout=30, trust_env=False)
    assert retry.status_code == 200
    assert retry.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_the_error_share_is_a_stable_share_set_at_runtime_and_checked(sim_server):
    sim = sim_server("--sim-instant")
    fault = sim.base_url + "/sim/fault"
    bad = httpx.post(fault, json={"error_share": 1.5, "stall_share": 0.5}, timeout=5,
                     trust_env=False)
    assert bad.status_code == 400 and "error_share" in bad.json()["message"]
    state = httpx.get(sim.base_url + "/sim/state", timeout=5, trust_env=False).json()
    assert state["error_share"] == 0.0 and state["stall_share"] == 0.0   # nothing applied
    ok = httpx.post(fault, json={"error_share": 0.5}, timeout=5, trust_env=False)
    assert ok.status_code == 200 and ok.json()["error_share"] == 0.5

    with httpx.Client(trust_env=False) as client:
        def failed(i: int) -> bool:
            r = client.post(sim.base_url + "/v1/chat/completions",
                            json=_long_chat(i, stream=False), timeout=30)
            assert r.status_code in (200, 500)
            return r.status_code == 500
        first = [failed(i) for i in range(40)]
        assert 8 <= sum(first) <= 32                   # about half of the prompts
        assert not any(failed(i) for i in range(40))   # and only their first request


def _stream(base: str, **extra) -> tuple[int, list[str]]:
    body = {"model": "sim/test-model", "stream": True,
            "messages": [{"role": "user", "content": "Why do cats purr?"}], **extra}
    events = []
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60,
                      trust_env=False) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, [r.text]
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line:
                events.append(line)
    return 200, events


def test_stream_chunk_shapes_with_reasoning_and_usage(sim_server):
    """sglang/srt/entrypoints/openai/serving_chat.py _generate_chat_stream and
    sglang/srt/entrypoints/openai/sse_utils.py: a first delta {reasoning_content: null,
    role: assistant, content: ""}; reasoning deltas {reasoning_content}; content deltas
    {reasoning_content: null, content}; a finish chunk with finish_reason and matched_stop;
    with include_usage a chunk with choices [] and the usage; then data: [DONE]."""

    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    code, events = _stream(sim.base_url, max_tokens=30000,
                           stream_options={"include_usage": True}, **THINK)
    assert code == 200 and all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    first, *middle, finish, usage = chunks
    assert first["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant",
                                            "content": ""}
    assert set(first["choices"][0]) == {"index", "delta", "logprobs", "finish_reason",
                                        "matched_stop"}
    reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content") or "" for c in middle)
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in middle)
    assert finish["choices"][0]["delta"] == {"reasoning_content": None}
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert finish["choices"][0]["matched_stop"] == 151645
    assert usage["choices"] == [] and usage["usage"]["reasoning_tokens"] > 0
    # The deltas add up to the non-streaming answer to the same prompt.
    whole = chat(sim.base_url, "Why do cats purr?", max_tokens=30000, **THINK).json()
    msg = whole["choices"][0]["message"]
    assert (reasoning, content) == (msg["reasoning_content"], msg["content"])
    assert usage["usage"] == whole["usage"]


def test_stream_without_include_usage_has_no_usage_chunk(sim_server):
    """sglang/srt/entrypoints/openai/utils.py should_include_usage: off unless
    stream_options.include_usage (or the server's default) asks for it."""

    sim = sim_server("--sim-instant")
    code, events = _stream(sim.base_url, max_tokens=20)
    chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert all(c["choices"] for c in chunks) and "usage" not in chunks[-1]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_stream_validation_error_is_plain_json_400(sim_server):
    """sglang/srt/entrypoints/openai/serving_chat.py _handle_streaming_request kick-starts the
    generator before sending 200, so a length error is an ordinary JSON 400."""

    sim = sim_server("--sim-instant", "--context-length", "100")
    code, [text] = _stream(sim.base_url, max_tokens=99)
    assert code == 400
    assert json.loads(text)["message"].startswith("Requested token count exceeds")


def test_stream_counts_as_streaming_in_metrics(sim_server):
    """sglang/srt/observability/metrics_collector.py observe_one_finished_request:
    is_streaming="true" for a streamed request."""
    sim = sim_server("--sim-instant", "--enable-metrics")
    _stream(sim.base_url, max_tokens=20)
    fam = families(get(sim.base_url, "/metrics").text)["sglang:generation_tokens"]
    [s] = [s for s in fam.samples if s.name.endswith("_total")
           and s.labels["is_streaming"] == "true"]
    assert s.value == 20
