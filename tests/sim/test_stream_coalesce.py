"""`--sim-stream-step 0`: the stream SGLang 0.5.23 sends a client that reads slower than the
server decodes. TokenizerManager._wait_one_response drains every output queued since the last
read and joins their text (`sglang/srt/managers/tokenizer_manager.py`
_coalesce_streaming_chunks); the reasoning parser then splits that one delta into the trace's
part and the answer's part (`sglang/srt/entrypoints/openai/serving_chat.py`
_generate_chat_stream). An instant server has decoded everything before the first read."""

from __future__ import annotations

import json

import httpx

from supervisor.dispatch.stream_answer import StreamAnswer


def _stream(base: str, max_tokens: int) -> tuple[list[dict], StreamAnswer]:
    body = {"model": "sim/test-model", "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True},
            "chat_template_kwargs": {"enable_thinking": True},
            "messages": [{"role": "user", "content": "Explain the tides, briefly."}]}
    chunks: list[dict] = []
    sa = StreamAnswer()
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            sa.feed(line)
            if line.startswith("data: {"):
                chunks.append(json.loads(line[6:]))
    return chunks, sa


def _text_deltas(chunks: list[dict]) -> list[dict]:
    return [c["choices"][0]["delta"] for c in chunks if c["choices"] and (
        c["choices"][0]["delta"].get("reasoning_content")
        or c["choices"][0]["delta"].get("content"))]


def test_coalesced_stream_is_one_delta_per_part_with_the_same_texts(sim_server):
    coalesced = sim_server("--sim-instant", "--reasoning-parser", "qwen3",
                           "--sim-stream-step", "0")
    stepped = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    for max_tokens in (2000, 60):          # an answer after its trace; a cut-off trace
        got, sa = _stream(coalesced.base_url, max_tokens)
        want, sb = _stream(stepped.base_url, max_tokens)
        deltas = _text_deltas(got)
        assert len(_text_deltas(want)) > len(deltas) >= 1
        assert len(deltas) == (2 if sb.content else 1)
        assert "".join(sa.reasoning) == "".join(sb.reasoning)
        assert "".join(sa.content) == "".join(sb.content)
        assert sa.usage == sb.usage and sa.finish_reason == sb.finish_reason
        assert sa.ended and sb.ended


def test_a_negative_step_is_refused(sim_server):
    sim = sim_server("--sim-stream-step", "-1", wait=False)
    assert sim.proc.wait(timeout=30) != 0


def test_sglangs_stream_interval_sets_the_delta_size_when_no_step_is_given(sim_server):
    # SGLang sends a delta every --stream-interval decode steps (stream_interval in
    # `sglang/srt/arg_groups/fields/serving.py`, default 1; applied in
    # `sglang/srt/managers/scheduler_components/output_streamer.py`); the daemon launches
    # with 16 (servers/launch_command.py).
    # The same answer in deltas of 4 tokens is four times the deltas of 16 (the last of each
    # part may be shorter); --sim-stream-step, when given, still wins.
    four = sim_server("--sim-instant", "--reasoning-parser", "qwen3", "--stream-interval", "4")
    sixteen = sim_server("--sim-instant", "--reasoning-parser", "qwen3",
                         "--stream-interval", "16")
    forced = sim_server("--sim-instant", "--reasoning-parser", "qwen3", "--stream-interval", "4",
                        "--sim-stream-step", "16")
    got4, s4 = _stream(four.base_url, 400)
    got16, s16 = _stream(sixteen.base_url, 400)
    got_forced, _ = _stream(forced.base_url, 400)
    assert "".join(s4.reasoning) == "".join(s16.reasoning) and s4.usage == s16.usage
    n4, n16 = len(_text_deltas(got4)), len(_text_deltas(got16))
    assert 4 * n16 - 8 <= n4 <= 4 * n16, (n4, n16)
    assert len(_text_deltas(got_forced)) == n16


def test_a_stream_interval_below_one_is_refused(sim_server):
    sim = sim_server("--stream-interval", "0", wait=False)
    assert sim.proc.wait(timeout=30) != 0
