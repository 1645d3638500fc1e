"""The chat completion request SGLang 0.5.23 is sent (supervisor/sglang/chat_request.py)."""

from __future__ import annotations

from supervisor.config import GenerationSection
from supervisor.sglang.chat_request import request_body


def test_request_body_turns_thinking_on_with_live_max_tokens() -> None:
    body = request_body("m", [{"role": "user", "content": "hi"}], GenerationSection(), 8192)
    assert body["max_completion_tokens"] == 8192 and "max_tokens" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert body["separate_reasoning"] is True and body["stream"] is False
    # Off is said too: Qwen3's template thinks when the request says nothing (DESIGN.md).
    off = request_body("m", [], GenerationSection(enable_thinking=False), 10)
    # Off is said too: Qwen3's template thinks when nothing is said, and SGLang 0.5.23
    # reads a missing enable_thinking as on for such a parser
    # (sglang/srt/entrypoints/openai/serving_chat.py:3565, _get_reasoning_from_request).
    assert off["chat_template_kwargs"] == {"enable_thinking": False}
    assert "separate_reasoning" not in off
    streamed = request_body("m", [], GenerationSection(enable_thinking=False), 10, rid="r1")
    assert streamed["chat_template_kwargs"] == {"enable_thinking": False}


def test_streamed_request_body_names_its_rid_and_asks_for_usage() -> None:
    body = request_body("m", [], GenerationSection(), 100, rid="p1#1#abc")
    assert body["stream"] is True and body["rid"] == "p1#1#abc"
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert request_body("m", [], GenerationSection(), 100)["stream"] is False
