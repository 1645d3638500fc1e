"""The simulator's looping answers, on a real server process: labelled, deterministic,
truncated at every limit, and found by the loop detector."""

from __future__ import annotations

import httpx

from supervisor.dispatch.loop_detector import is_loop
from supervisor.sim.looping_text import loop_plan, loop_visible, prompt_words
from supervisor.sim.output_plan import natural_length, prompt_digest
from tests.fixtures.real_prompts import real_prompts

THINK = {"separate_reasoning": True, "chat_template_kwargs": {"enable_thinking": True}}


def _answers(base: str, rows: list[list[dict]], max_tokens: int) -> list[dict]:
    out = []
    with httpx.Client(base_url=base, timeout=30, trust_env=False) as client:
        for messages in rows:
            r = client.post("/v1/chat/completions", json={
                "model": "m", "messages": messages, "max_tokens": max_tokens, **THINK})
            assert r.status_code == 200, r.text
            out.append(r.json())
    return out


def _label(messages: list[dict], seed: int, share: float, produced: int) -> bool:
    digest = prompt_digest(messages, seed)
    plan = loop_plan(digest, natural_length(digest), share, len(prompt_words(messages)))
    return loop_visible(plan, produced)


def _confusion(rows, answers, seed, share):
    tp = fp = fn = tn = 0
    for messages, a in zip(rows, answers):
        choice = a["choices"][0]
        if choice["finish_reason"] != "length":
            continue
        m = choice["message"]
        label = _label(messages, seed, share, a["usage"]["completion_tokens"])
        flagged = is_loop(m["content"], m["reasoning_content"], "length")
        tp += label and flagged
        fn += label and not flagged
        fp += flagged and not label
        tn += not (label or flagged)
    return tp, fp, fn, tn


def test_loops_are_labelled_and_detected(sim_server):
    sim = sim_server("--sim-instant", "--sim-loop-share", "0.4")
    rows = [[{"role": "user", "content": f"Question {i}: explain it."}] for i in range(600)]
    tp, fp, fn, tn = _confusion(rows, _answers(sim.base_url, rows, 4096), 0, 0.4)
    assert tp >= 20 and tn >= 20                     # both kinds are there
    assert tp / (tp + fp) >= 0.9 and tp / (tp + fn) >= 0.85, (tp, fp, fn, tn)


def test_a_looping_prompt_runs_into_every_limit_and_gives_the_same_text(sim_server):
    sim = sim_server("--sim-instant", "--sim-loop-share", "1.0")
    rows = [[{"role": "user", "content": f"Question {i}: explain it."}] for i in range(200)]
    first = _answers(sim.base_url, rows, 4096)
    loopers = [r for r, a in zip(rows, first) if _label(r, 0, 1.0, 4096)]
    assert loopers
    again = _answers(sim.base_url, loopers, 8192)
    assert all(a["choices"][0]["finish_reason"] == "length" for a in again)
    assert all(a["usage"]["completion_tokens"] == 8192 for a in again)
    repeat = _answers(sim.base_url, loopers[:3], 4096)
    by_id = {r[0]["content"]: a for r, a in zip(rows, first)}
    for r, a in zip(loopers[:3], repeat):
        assert a["choices"][0]["message"] == by_id[r[0]["content"]]["choices"][0]["message"]


def test_without_a_loop_share_nothing_loops(sim_server):
    sim = sim_server("--sim-instant")
    rows = [[{"role": "user", "content": f"Question {i}: explain it."}] for i in range(200)]
    tp, fp, fn, tn = _confusion(rows, _answers(sim.base_url, rows, 4096), 0, 0.0)
    assert tp == fp == fn == 0 and tn > 10


def test_real_prompts_echoed_in_loops_are_detected(sim_server):
    """The real-questions fixture: multilingual text, quotes and newlines in the loops."""
    sim = sim_server("--sim-instant", "--sim-loop-share", "0.5")
    rows = [r["messages"] for r in real_prompts()]
    tp, fp, fn, tn = _confusion(rows, _answers(sim.base_url, rows, 4096), 0, 0.5)
    # 48 questions at a 0.5 loop share: only the truncated ones can loop, a handful.
    assert tp >= 3 and fp == 0 and fn <= 1, (tp, fp, fn, tn)
