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
