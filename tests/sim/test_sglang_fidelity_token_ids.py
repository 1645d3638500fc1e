"""Token ids on the chat route as SGLang 0.5.23 gives and takes them: the `sglext` ids chunk
(asked by header or body), `input_ids` (the template skipped), /v1/tokenize and /detokenize.

Part of the simulator's fidelity tests (test_sglang_fidelity_*.py): each test is one fact
read from SGLang 0.5.23's own source, naming the file (path under `sglang/`); every test
runs the real simulator process (`python -m supervisor.sim`) on loopback. The ids are the
simulator's own toy tokenizer's (`supervisor/sim/toy_tokenizer.py`); their shapes are
SGLang's."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from tests.sim.sglang_calls import THINK, sse_events

IDS = {"x-sglext-return-input-ids": "1", "x-sglext-return-output-ids": "1"}
QUESTION = [{"role": "user", "content": "Explain, step by step, how tides work."}]


def _post(base: str, path: str, body: dict[str, Any],
          headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(base + path, json=body, headers=headers or {}, timeout=30,
                      trust_env=False)


def _events(base: str, body: dict[str, Any], headers: dict[str, str]) -> list[Any]:
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, headers=headers,
                      timeout=30, trust_env=False) as resp:
        assert resp.status_code == 200, resp.read()
        return sse_events(resp.iter_lines())


def _stream_body(messages: list[dict], max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, **THINK, **extra}


def test_the_ids_chunk_comes_after_the_finish_chunk_before_usage_and_done(sim_server):
    """`sglang/srt/entrypoints/openai/serving_chat.py` ~1283-1289: the headers
    `x-sglext-return-input-ids: 1` / `x-sglext-return-output-ids: 1` set
    return_{input,output}_ids_in_sglext; ~2716-2770: after the finish chunk, one chunk
    ChatCompletionStreamResponse(choices=[], sglext=SglExt(input_ids, output_ids)) dumped
    whole (`"usage": null` kept; SglExt drops its None fields, protocol.py ~499-503), then
    the usage chunk, then [DONE]. output_ids is one list per choice."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    events = _events(sim.base_url, _stream_body(QUESTION, 40), IDS)
    assert events[-1] == "[DONE]"
    usage, ext, finish = events[-2], events[-3], events[-4]
    assert finish["choices"][0]["finish_reason"] == "length"
    assert set(ext) == {"id", "object", "created", "model", "choices", "usage", "sglext"}
    assert ext["choices"] == [] and ext["usage"] is None and ext["id"] == finish["id"]
    assert set(ext["sglext"]) == {"input_ids", "output_ids"}
    assert len(ext["sglext"]["output_ids"]) == 1
    assert len(ext["sglext"]["output_ids"][0]) == usage["usage"]["completion_tokens"] == 40
    assert len(ext["sglext"]["input_ids"]) == usage["usage"]["prompt_tokens"]
    # Equal to /v1/tokenize with the same messages (serving_tokenize.py
    # _tokenize_chat_request renders them as the chat route does).
    tok = _post(sim.base_url, "/v1/tokenize", {"messages": QUESTION, **THINK}).json()
    assert tok["tokens"] == ext["sglext"]["input_ids"] and tok["count"] == len(tok["tokens"])


def test_ids_are_asked_one_by_one_by_header_or_body_and_not_at_all_by_default(sim_server):
    """serving_chat.py ~826-832: each side on its own, from the header (only the value "1")
    or the body's return_input_ids_in_sglext / return_output_ids_in_sglext (protocol.py
    ~965); nothing asked: no ids chunk at all."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    plain = _events(sim.base_url, _stream_body(QUESTION, 8), {})
    assert not any(isinstance(e, dict) and "sglext" in e for e in plain)
    only_out = _events(sim.base_url, _stream_body(QUESTION, 8),
                       {"x-sglext-return-output-ids": "1", "x-sglext-return-input-ids": "0"})
    assert set(only_out[-3]["sglext"]) == {"output_ids"}
    by_body = _events(sim.base_url,
                      _stream_body(QUESTION, 8, return_input_ids_in_sglext=True), {})
    assert set(by_body[-3]["sglext"]) == {"input_ids"}


def test_unstreamed_the_ids_ride_on_the_response(sim_server):
    """serving_chat.py ~2877-2896 (_build_chat_response): the response's own `sglext`
    (ChatCompletionResponse, protocol.py ~1336-1351), after `metadata`."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    body = {"model": "m", "messages": QUESTION, "max_tokens": 16, **THINK}
    got = _post(sim.base_url, "/v1/chat/completions", body, IDS).json()
    assert list(got)[-2:] == ["metadata", "sglext"]
    assert len(got["sglext"]["output_ids"][0]) == got["usage"]["completion_tokens"] == 16
    assert "sglext" not in _post(sim.base_url, "/v1/chat/completions", body).json()


def test_detokenize_gives_the_raw_output_and_tokenize_a_plain_prompt(sim_server):
    """`sglang/srt/entrypoints/openai/serving_tokenize.py` OpenAIServingDetokenize: tokens
    (a list, or a list of lists) decoded with skip_special_tokens (default true; the
    reasoning markers are ordinary tokens, so they stay) -> {"text"}; `[]` -> "".
    OpenAIServingTokenize: a prompt string -> {"tokens", "count", "max_model_len"}, a list of
    them -> lists. `http_server.py` ~1906-1936: /v1/tokenize and /tokenize, /v1/detokenize
    and /detokenize."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3", "--context-length", "8192")
    body = {"model": "m", "messages": QUESTION, "max_tokens": 6000, **THINK}
    got = _post(sim.base_url, "/v1/chat/completions", body, IDS).json()
    ids = got["sglext"]["output_ids"][0]
    msg = got["choices"][0]["message"]
    text = _post(sim.base_url, "/detokenize", {"tokens": ids}).json()["text"]
    assert text.startswith("<think>")
    reasoning, _, content = text[len("<think>"):].partition("</think>")
    assert (reasoning, content) == (msg["reasoning_content"], msg["content"])
    both = _post(sim.base_url, "/v1/detokenize", {"tokens": [ids[:5], ids[5:]]}).json()
    assert "".join(both["text"]) == text
    assert _post(sim.base_url, "/detokenize", {"tokens": []}).json() == {"text": ""}
    tok = _post(sim.base_url, "/tokenize", {"prompt": "Hello, world"}).json()
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 8192
    assert _post(sim.base_url, "/detokenize",
                 {"tokens": tok["tokens"]}).json()["text"] == "Hello, world"
    listed = _post(sim.base_url, "/v1/tokenize", {"prompt": ["a", "bc"]}).json()
    assert listed["count"] == [len(t) for t in listed["tokens"]]
    bad = _post(sim.base_url, "/detokenize", {"tokens": [7, -1]})
    assert bad.status_code == 400 and bad.json()["object"] == "error"


def test_the_ids_come_after_an_abort_request_but_not_after_an_error_abort(sim_server):
    """serving_chat.py ~2716-2724: `if return_output_ids and output_ids and not
    error_aborted` -- an /abort_request ends the stream with finish_reason "abort" and the
    ids of what was sampled; a scheduler abort with an error status (the error share) sends
    the error chunk and no ids."""
    sim = sim_server("--sim-tokens-per-s", "200", "--reasoning-parser", "qwen3",
                     "--stream-interval", "4")
    body = _stream_body(QUESTION, 2000, rid="cut-me")
    box: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: box.update(events=_events(sim.base_url, body, IDS)))
    reader.start()
    for _ in range(100):                  # bounded: until the request is decoding
        if httpx.get(sim.base_url + "/sim/state", trust_env=False).json()["running"]:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    assert _post(sim.base_url, "/abort_request", {"rid": "cut-me"}).status_code == 200
    reader.join(30)
    events = box["events"]
    assert events[-4]["choices"][0]["finish_reason"] == "abort"
    out = events[-3]["sglext"]["output_ids"][0]
    assert 0 < len(out) == events[-2]["usage"]["completion_tokens"] < 2000
    streamed = "".join((e["choices"][0]["delta"].get("reasoning_content") or "")
                       + (e["choices"][0]["delta"].get("content") or "")
                       for e in events if isinstance(e, dict) and e.get("choices"))
    text = _post(sim.base_url, "/detokenize", {"tokens": out}).json()["text"]
    assert text.replace("<think>", "", 1).startswith(streamed)

    failing = sim_server("--sim-tokens-per-s", "20000", "--reasoning-parser", "qwen3",
                         "--sim-error-share", "1")
    errored = _events(failing.base_url, _stream_body(QUESTION, 600), IDS)
    assert any(isinstance(e, dict) and "error" in e for e in errored)
    assert not any(isinstance(e, dict) and "sglext" in e for e in errored)
