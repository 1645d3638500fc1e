"""Token ids, held to the real SGLang 0.5.23 CPU server with the same test body as the
simulator (tests/fixtures/real_sglang.py: [sim] and [real], the real half marked
`real_sglang` and `slow`): the `sglext` ids chunk's shape and place, its input ids equal to
/v1/tokenize's, and a greedy answer continued from its ids through the chat route's
`input_ids` + `continue_final_message` equal, token for token, to one greedy run to the
higher limit (issue 38's 32 + 32 == 64). The real model is random weights: ids and counts
are compared, never text."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fixtures.real_sglang import FidelityServer, client
from tests.sim.sglang_calls import sse_events

IDS = {"x-sglext-return-input-ids": "1", "x-sglext-return-output-ids": "1"}
MESSAGES = [{"role": "user", "content": "Count from one to twenty, one number a line."}]
# Greedy, and the whole budget written (a random-weight model may sample its stop token).
GREEDY = {"temperature": 0, "ignore_eos": True}
pytestmark = pytest.mark.timeout(600)


def _stream(server: FidelityServer, body: dict[str, Any]) -> list[Any]:
    body = {"model": server.model, "stream": True,
            "stream_options": {"include_usage": True}, **body}
    with client() as c, c.stream("POST", server.base_url + "/v1/chat/completions",
                                 json=body, headers=IDS) as r:
        assert r.status_code == 200, r.read()
        return sse_events(r.iter_lines())


def _ids(events: list[Any]) -> tuple[list[int], list[int]]:
    ext = events[-3]["sglext"]
    return ext["input_ids"], ext["output_ids"][0]


def test_the_ids_chunk_sits_before_usage_and_matches_tokenize(fidelity_server: FidelityServer):
    """`sglang/srt/entrypoints/openai/serving_chat.py` ~1283-1289 (the headers) and
    ~2716-2770 (one chunk, choices [], the whole SglExt, before the usage chunk and
    [DONE]); its input_ids are the chat template's ids, as /v1/tokenize gives them for the
    same messages (`serving_tokenize.py` _tokenize_chat_request)."""
    server = fidelity_server
    events = _stream(server, {"messages": MESSAGES, "max_tokens": 12, **GREEDY})
    assert events[-1] == "[DONE]"
    usage, ext = events[-2]["usage"], events[-3]
    assert events[-4]["choices"][0]["finish_reason"] == "length"
    assert set(ext) == {"id", "object", "created", "model", "choices", "usage", "sglext"}
    assert ext["choices"] == [] and ext["usage"] is None
    assert ext["object"] == "chat.completion.chunk" and ext["id"] == events[-4]["id"]
    assert set(ext["sglext"]) == {"input_ids", "output_ids"}
    input_ids, output_ids = _ids(events)
    assert len(output_ids) == usage["completion_tokens"] == 12
    assert len(input_ids) == usage["prompt_tokens"]
    with client() as c:
        tok = c.post(server.base_url + "/v1/tokenize",
                     json={"model": server.model, "messages": MESSAGES}).json()
    assert tok["tokens"] == input_ids and tok["count"] == len(input_ids)


def test_32_then_32_more_from_the_ids_equal_64_in_one_greedy_run(
        fidelity_server: FidelityServer):
    """Issue 38, checked on the real server: `input_ids` skip the template
    (serving_chat.py ~1945-1955), `continue_final_message` with the answer so far as the
    last assistant message; the ids of 32 tokens and then 32 more equal one 64-token greedy
    run. Where they differ the top-2 logprob gap at the first difference is printed, and
    only a near tie (< 1e-3) passes."""
    server = fidelity_server
    base = {"messages": MESSAGES, **GREEDY}
    prompt, first = _ids(_stream(server, {**base, "max_tokens": 32}))
    with client() as c:
        so_far = c.post(server.base_url + "/detokenize",
                        json={"model": server.model, "tokens": first}).json()["text"]
    more_events = _stream(server, {
        **base, "messages": [*MESSAGES, {"role": "assistant", "content": so_far}],
        "input_ids": prompt + first, "continue_final_message": True, "max_tokens": 32})
    echoed, more = _ids(more_events)
    assert echoed == prompt + first
    assert more_events[-2]["usage"]["prompt_tokens"] == len(prompt) + 32
    _, whole = _ids(_stream(server, {**base, "max_tokens": 64}))
    assert len(first) == len(more) == 32 and len(whole) == 64
    stitched = first + more
    if stitched != whole:
        at = next(i for i, (a, b) in enumerate(zip(stitched, whole)) if a != b)
        gap = _top2_gap(server, at)
        print(f"[{server.kind}] ids differ first at {at}: {stitched[at]} vs {whole[at]}, "
              f"top-2 logprob gap there {gap:.2e}")
        assert gap < 1e-3, f"not a near tie: gap {gap:.2e} at token {at}"


def _top2_gap(server: FidelityServer, at: int) -> float:
    with client() as c:
        got = c.post(server.base_url + "/v1/chat/completions", json={
            "model": server.model, "messages": MESSAGES, "max_tokens": 64, **GREEDY,
            "logprobs": True, "top_logprobs": 2}).json()
    top = got["choices"][0]["logprobs"]["content"][at]["top_logprobs"]
    return top[0]["logprob"] - top[1]["logprob"]


def test_unknown_ids_are_refused_by_detokenize_only_on_the_simulator(shared_sim):
    """The simulated model reads back only its own ids; a bad one is a 400 with SGLang's
    error body, naming it."""
    r = httpx.post(shared_sim.base_url + "/detokenize", json={"tokens": [5]}, timeout=30,
                   trust_env=False)
    assert r.status_code == 400 and "tokens[0]: 5" in r.json()["message"]
