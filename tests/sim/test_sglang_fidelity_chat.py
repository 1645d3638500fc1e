"""POST /v1/chat/completions (unstreamed) in SGLang 0.5.23's shapes: the reasoning split,
finish reasons, usage, the model name, length refusals, LoRA names.

Part of the simulator's fidelity tests (test_sglang_fidelity_*.py): each test is one fact
read from SGLang 0.5.23's own source, its docstring naming the file (path under `sglang/`);
every test runs the real simulator process (`python -m supervisor.sim`) on loopback.
"""

from __future__ import annotations

import httpx

from tests.sim.sglang_calls import THINK, chat


def test_without_reasoning_parser_the_think_markers_stay_in_content(sim_server):
    """sglang/srt/entrypoints/openai/serving_chat.py _build_chat_response: reasoning is split
    only `if self.reasoning_parser and request.separate_reasoning`; otherwise the raw text,
    <think> markers included, is the content and reasoning_content is null."""
    sim = sim_server("--sim-instant")
    body = chat(sim.base_url, "Why is the sky blue?", max_tokens=30000, **THINK).json()
    msg = body["choices"][0]["message"]
    assert msg["content"].startswith("<think>\n") and "\n</think>\n\n" in msg["content"]
    assert msg["reasoning_content"] is None
    # No parser: the scheduler does not count reasoning tokens either.
    assert body["usage"]["reasoning_tokens"] == 0
    assert body["usage"]["completion_tokens_details"] is None


def test_separate_reasoning_false_keeps_raw_text_even_with_a_parser(sim_server):
    """sglang/srt/entrypoints/openai/serving_chat.py: the split needs separate_reasoning
    (protocol.py default True)."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    body = chat(sim.base_url, "Why is the sky blue?", max_tokens=30000,
                 separate_reasoning=False,
                 chat_template_kwargs={"enable_thinking": True}).json()
    assert "</think>" in body["choices"][0]["message"]["content"]


def test_with_reasoning_parser_the_trace_is_split(sim_server):
    """sglang/srt/parser/reasoning_parser.py detect_and_parse: reasoning is the text before
    </think> (leading <think> dropped), content what follows, neither stripped."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    body = chat(sim.base_url, "Why is the sky blue?", max_tokens=30000, **THINK).json()
    msg = body["choices"][0]["message"]
    assert msg["reasoning_content"].startswith("\n") and "<think>" not in msg["reasoning_content"]
    assert msg["content"].startswith("\n\n") and msg["content"].strip()
    assert "</think>" not in msg["content"]


def test_cut_inside_thinking_gives_empty_content_and_all_text_in_reasoning(sim_server):
    """sglang/srt/parser/reasoning_parser.py: no </think> in the text means "reasoning was
    truncated before end token": all of it is reasoning_text; serving_chat.py then sends
    content "" (never null)."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    body = chat(sim.base_url, "Prove Fermat's last theorem.", max_tokens=12, **THINK).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == ""
    assert len(choice["message"]["reasoning_content"].split()) == 12
    assert choice["matched_stop"] is None


def test_matched_stop_is_the_eos_token_id_and_no_tool_calls_key(sim_server):
    """sglang/srt/entrypoints/openai/serving_chat.py: matched_stop is finish_reason["matched"]
    (the stop token id, an int, for an EOS stop); protocol.py ChatMessage drops tool_calls
    when None, and ChatCompletionResponseChoice drops hidden_states & co."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    body = chat(sim.base_url, "Say hi.", max_tokens=30000, **THINK).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert isinstance(choice["matched_stop"], int) and choice["matched_stop"] == 151645
    assert set(choice["message"]) == {"role", "content", "reasoning_content"}
    assert set(choice) == {"index", "message", "logprobs", "finish_reason", "matched_stop"}
    assert set(body) == {"id", "object", "created", "model", "choices", "usage", "metadata"}


def test_usage_shape_completion_tokens_details_only_with_reasoning(sim_server):
    """sglang/srt/entrypoints/openai/usage_processor.py calculate_token_usage:
    completion_tokens_details = {reasoning_tokens} only when reasoning_tokens > 0;
    UsageInfo field order in protocol.py."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    on = chat(sim.base_url, "Explain tides.", max_tokens=30000, **THINK).json()["usage"]
    assert list(on) == ["prompt_tokens", "total_tokens", "completion_tokens",
                        "prompt_tokens_details", "reasoning_tokens",
                        "completion_tokens_details"]
    assert on["reasoning_tokens"] > 0
    assert on["completion_tokens_details"] == {"reasoning_tokens": on["reasoning_tokens"]}
    off = chat(sim.base_url, "Explain tides.", max_tokens=50,
                chat_template_kwargs={"enable_thinking": False}).json()["usage"]
    assert off["reasoning_tokens"] == 0 and off["completion_tokens_details"] is None


def test_model_defaults_to_default_and_is_echoed(sim_server):
    """sglang/srt/entrypoints/openai/protocol.py: ChatCompletionRequest.model defaults to
    DEFAULT_MODEL_NAME "default"; the response echoes request.model."""
    sim = sim_server("--sim-instant")
    r = httpx.post(sim.base_url + "/v1/chat/completions", trust_env=False, timeout=30,
                   json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    assert r.json()["model"] == "default"
    assert chat(sim.base_url, max_tokens=4).json()["model"] == "sim/test-model"


def _error(r: httpx.Response) -> str:
    assert r.status_code == 400
    body = r.json()
    assert body == {"object": "error", "message": body["message"], "type": "BadRequestError",
                    "param": None, "code": 400}
    return body["message"]


def test_input_at_context_length_is_refused(sim_server):
    """sglang/srt/managers/tokenizer_manager.py _validate_one_request:
    `input_token_num >= self.context_len` is refused with "The input (N tokens) is longer than
    the model's context length (M tokens)."; serving_chat.py answers 400 BadRequestError."""
    sim = sim_server("--sim-instant", "--context-length", "100")
    # 4 + 2 template tokens + 376 chars / 4 = 100 tokens: exactly the context.
    msg = _error(chat(sim.base_url, "x" * 376))
    assert msg == "The input (100 tokens) is longer than the model's context length (100 tokens)."
    # 99 tokens pass this check but not the scheduler's (max_req_input_len = 100 - 1 - 5):
    # that refusal names the other limit (sglang/srt/managers/utils.py:270-287).
    late = chat(sim.base_url, "x" * 372, max_tokens=1)
    assert late.status_code == 400 and late.json()["message"].startswith(
        "Input length (99 tokens) exceeds the maximum allowed length (94 tokens).")
    assert chat(sim.base_url, "x" * 348, max_tokens=1).status_code == 200   # 93 tokens


def test_input_plus_max_tokens_over_context_is_refused_but_equal_is_fine(sim_server):
    """sglang/srt/managers/tokenizer_manager.py _validate_one_request: the total check is
    `(max_new_tokens + input_token_num) > _max_req_len` (strictly greater)."""
    sim = sim_server("--sim-instant", "--context-length", "100")
    ok = chat(sim.base_url, "x" * 160, max_tokens=54)          # 46 + 54 = 100: allowed
    assert ok.status_code == 200
    msg = _error(chat(sim.base_url, "x" * 160, max_tokens=55))
    assert msg == ("Requested token count exceeds the model's maximum context length of 100 "
                   "tokens. You requested a total of 101 tokens: 46 tokens from the input "
                   "messages and 55 tokens for the completion. Please reduce the number of "
                   "tokens in the input messages or the completion to fit within the limit.")


def test_max_completion_tokens_over_context_is_refused_first(sim_server):
    """sglang/srt/entrypoints/openai/serving_chat.py _validate_request: max_completion_tokens
    (or max_tokens) above the context length is refused before tokenizing, with SGLang's
    message (no space after the period)."""
    sim = sim_server("--sim-instant", "--context-length", "100")
    msg = _error(chat(sim.base_url, "x" * 800, max_completion_tokens=101))
    assert msg == ("max_completion_tokens is too large: 101.This model supports at most 100 "
                   "completion tokens.")


def test_model_with_colon_asks_for_a_lora_adapter(sim_server):
    """sglang/srt/entrypoints/openai/serving_base.py _parse_model_parameter reads
    "base:adapter" as a LoRA adapter; sglang/srt/managers/tokenizer_manager.py refuses it
    without --enable-lora."""
    sim = sim_server("--sim-instant")
    r = httpx.post(sim.base_url + "/v1/chat/completions", trust_env=False, timeout=30,
                   json={"model": "team:model", "max_tokens": 4,
                         "messages": [{"role": "user", "content": "Hi"}]})
    assert _error(r).startswith("LoRA adapter 'model' was requested, but LoRA is not enabled.")
