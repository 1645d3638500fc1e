"""A truncated answer continued from its exact tokens is the answer the simulator gives the
same prompt at the higher limit in one go, byte for byte: text, reasoning split, ids,
finish_reason and token counts -- cut inside the thinking, right where it ends, and after
`</think>`; thinking off; streamed and not; loops and lists; and continued again.

The continuation is sent as the daemon sends it (issue 38): the chat route's `input_ids` =
the prompt's ids + the answer's output ids (both from the `sglext` chunk),
`continue_final_message` with the answer so far as the last assistant message (the
reasoning parser takes its state from it: `sglang/srt/parser/reasoning_parser.py`
ReasoningParser.__init__, previous_content), and max tokens = the new limit minus what the
answer has. Every test runs the simulator process on loopback."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

IDS = {"x-sglext-return-input-ids": "1", "x-sglext-return-output-ids": "1"}
THINK = {"separate_reasoning": True, "chat_template_kwargs": {"enable_thinking": True}}
NO_THINK = {"separate_reasoning": True, "chat_template_kwargs": {"enable_thinking": False}}


@dataclass
class Answer:
    reasoning: str
    content: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    input_ids: list[int]
    output_ids: list[int]


def _ask(base: str, body: dict[str, Any], stream: bool) -> Answer:
    """One request, streamed (the deltas joined) or not."""
    body = {"model": "m", **body}
    if not stream:
        r = httpx.post(base + "/v1/chat/completions", json=body, headers=IDS, timeout=60,
                       trust_env=False)
        assert r.status_code == 200, r.text
        got = r.json()
        msg, choice = got["choices"][0]["message"], got["choices"][0]
        return Answer(msg["reasoning_content"] or "", msg["content"], choice["finish_reason"],
                      got["usage"]["prompt_tokens"], got["usage"]["completion_tokens"],
                      got["sglext"]["input_ids"], got["sglext"]["output_ids"][0])
    body.update(stream=True, stream_options={"include_usage": True})
    reasoning, content, finish, ext, usage = [], [], None, {}, {}
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, headers=IDS,
                      timeout=60, trust_env=False) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            ext = event.get("sglext") or ext
            usage = event.get("usage") or usage
            for choice in event["choices"]:
                reasoning.append(choice["delta"].get("reasoning_content") or "")
                content.append(choice["delta"].get("content") or "")
                finish = choice["finish_reason"] or finish
    return Answer("".join(reasoning), "".join(content), finish, usage["prompt_tokens"],
                  usage["completion_tokens"], ext["input_ids"], ext["output_ids"][0])


def _detokenize(base: str, ids: list[int]) -> str:
    r = httpx.post(base + "/detokenize", json={"tokens": ids}, timeout=30, trust_env=False)
    assert r.status_code == 200, r.text
    return r.json()["text"]


def _continue(base: str, messages: list[dict], first: Answer, limit: int,
              kwargs: dict[str, Any], stream: bool) -> Answer:
    """The continuation request, then the stitched answer (texts and ids joined, counts
    added, finish_reason from the last part)."""
    so_far = _detokenize(base, first.output_ids)
    cont = _ask(base, {
        "messages": [*messages, {"role": "assistant", "content": so_far}],
        "input_ids": first.input_ids + first.output_ids, "continue_final_message": True,
        "max_tokens": limit - len(first.output_ids), **kwargs}, stream)
    assert cont.input_ids == first.input_ids + first.output_ids
    assert cont.prompt_tokens == first.prompt_tokens + first.completion_tokens
    return Answer(first.reasoning + cont.reasoning, first.content + cont.content,
                  cont.finish_reason, first.prompt_tokens,
                  first.completion_tokens + cont.completion_tokens, first.input_ids,
                  first.output_ids + cont.output_ids)


def _check(base: str, messages: list[dict], low: int, high: int, kwargs: dict[str, Any],
           stream: bool) -> tuple[Answer, Answer]:
    body = {"messages": messages, **kwargs}
    first = _ask(base, {**body, "max_tokens": low}, stream)
    whole = _ask(base, {**body, "max_tokens": high}, stream)
    if first.finish_reason != "length":
        assert first == whole              # ended before the lower limit: nothing to continue
        return first, whole
    stitched = _continue(base, messages, first, high, kwargs, stream)
    assert stitched == whole
    assert _detokenize(base, stitched.output_ids) == _detokenize(base, whole.output_ids)
    return first, whole


def _questions(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"Question {i}: work it out in detail."}]
            for i in range(n)]


def test_continued_inside_the_thinking_at_the_end_of_it_and_after_it(sim_server):
    """The three places a limit can cut a thinking answer -- halfway through the thought,
    right before the token that closes it, halfway through the answer -- each continued to
    the one-go answer at the higher limit, streamed and not."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    cuts = 0
    for messages in _questions(6):
        whole = _ask(sim.base_url, {"messages": messages, "max_tokens": 6000, **THINK}, False)
        total = len(whole.output_ids)
        thought = _thought_tokens(sim.base_url, whole.output_ids)
        for low in sorted({thought // 2, thought, (thought + total) // 2} - {0, total}):
            for stream in (False, True):
                first, _ = _check(sim.base_url, messages, low, 6000, THINK, stream)
                assert first.finish_reason == "length"
                assert (first.content == "") == (low <= thought)
                cuts += 1
    assert cuts >= 30


def _thought_tokens(base: str, ids: list[int]) -> int:
    """How many ids precede the one whose text closes the thought."""
    r = httpx.post(base + "/detokenize", json={"tokens": [[i] for i in ids]}, timeout=30,
                   trust_env=False)
    texts = r.json()["text"]
    return next((n for n, text in enumerate(texts) if "</think>" in text), len(ids))


def test_continued_without_thinking_and_without_a_reasoning_parser(sim_server):
    """enable_thinking false (the template closes the thought; the ids say so) and a server
    without --reasoning-parser (the markers stay in the content)."""
    parsed = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    raw = sim_server("--sim-instant")
    for messages in _questions(6):
        _check(parsed.base_url, messages, 300, 5000, NO_THINK, False)
        first, _ = _check(raw.base_url, messages, 300, 5000, THINK, True)
        assert first.content.startswith("<think>") and first.reasoning == ""


def test_loops_and_lists_continue_to_the_same_text(sim_server):
    """Loops (some echoing the prompt) and numbered lists go on where they were cut."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3", "--sim-loop-share", "0.5")
    rows = [[{"role": "user", "content": f"Repeat after me, item {i}: alpha beta gamma."}]
            for i in range(60)]
    truncated = 0
    for messages in rows:
        first, _ = _check(sim.base_url, messages, 4096, 8192, THINK, False)
        truncated += first.finish_reason == "length"
    assert truncated >= 5


def test_continued_twice_and_past_the_end_of_the_answer(sim_server):
    """Truncated again, continued again: 200 -> 700 -> 3000 equals 3000 in one go; a
    continuation whose answer ends on its own finishes "stop" with the answer's count."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    stopped = 0
    twice = 0
    for messages in _questions(12):
        answer = _ask(sim.base_url, {"messages": messages, "max_tokens": 200, **THINK}, True)
        parts = 1
        for limit, stream in ((700, True), (3000, False)):
            if answer.finish_reason == "length":
                answer = _continue(sim.base_url, messages, answer, limit, THINK, stream)
                parts += 1
        whole = _ask(sim.base_url, {"messages": messages, "max_tokens": 3000, **THINK}, False)
        assert answer == whole
        stopped += parts > 1 and whole.finish_reason == "stop"
        twice += parts == 3
    assert stopped >= 2 and twice >= 2


def test_input_ids_the_simulator_did_not_make_are_refused_with_one_line(sim_server):
    """Real SGLang continues any ids; the simulated model can only read back its own, and
    says which id it could not."""
    sim = sim_server("--sim-instant")
    r = httpx.post(sim.base_url + "/v1/chat/completions", trust_env=False, timeout=30, json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}],
        "input_ids": [1, 2, 3], "max_tokens": 5})
    assert r.status_code == 400
    assert r.json()["message"].startswith("input_ids[0]: expected <|im_start|>")
