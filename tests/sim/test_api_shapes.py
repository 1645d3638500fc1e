"""The simulator speaks SGLang 0.5.x's HTTP API: the shapes the daemon parses, checked on a
real server process over loopback."""

from __future__ import annotations

import time

import httpx

THINK = {"separate_reasoning": True, "chat_template_kwargs": {"enable_thinking": True}}


def _chat(base: str, content: str, **extra) -> httpx.Response:
    body = {"model": "sim/test-model", "messages": [{"role": "user", "content": content}],
            **THINK, **extra}
    return httpx.post(base + "/v1/chat/completions", json=body, timeout=30, trust_env=False)


def test_health_is_503_while_loading_then_200(sim_server):
    sim = sim_server("--sim-startup-s", "1.5", wait=False)
    deadline = time.monotonic() + 10
    seen = set()
    while time.monotonic() < deadline and 200 not in seen:
        try:
            for path in ("/health", "/health_generate"):
                # A 200 takes at least a second (SGLang's probe sleeps 1 s): a 1 s client
                # timeout would race it on a busy machine.
                seen.add(httpx.get(sim.base_url + path, timeout=5, trust_env=False).status_code)
        except httpx.TransportError:
            pass                                    # not listening yet
        time.sleep(0.05)
    assert seen == {503, 200}
    assert "fired up and ready to roll" in sim.log_text()


def test_models_model_info_and_server_info_echo_the_launch_flags(sim_server):
    sim = sim_server("--max-running-requests", "7", "--mem-fraction-static", "0.71",
                     "--max-mamba-cache-size", "200", "--context-length", "4096",
                     "--reasoning-parser", "qwen3", "--tp-size", "2", "--enable-metrics")
    get = lambda p: httpx.get(sim.base_url + p, timeout=5, trust_env=False).json()  # noqa: E731
    models = get("/v1/models")
    assert models["object"] == "list" and models["data"][0]["id"] == "sim/test-model"
    assert models["data"][0]["max_model_len"] == 4096
    info = get("/model_info")
    assert info["model_path"] == "sim/test-model" and info["is_generation"] is True
    server = get("/server_info")
    assert (server["max_running_requests"], server["mem_fraction_static"],
            server["max_mamba_cache_size"], server["context_length"],
            server["reasoning_parser"], server["tp_size"]) == (7, 0.71, 200, 4096, "qwen3", 2)
    # 0.5.23's internal state has the slot count, not the queue (that is in /metrics).
    assert server["internal_states"][0]["effective_max_running_requests_per_dp"] == 7


def test_chat_completion_shape_with_thinking(sim_server):
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    r = _chat(sim.base_url, "What is the capital of France?", max_tokens=32768 - 100)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "sim/test-model"
    [choice] = body["choices"]
    msg = choice["message"]
    assert msg["role"] == "assistant"
    assert msg["reasoning_content"] and msg["content"]           # a trace, then an answer
    assert "<think>" not in msg["content"]
    assert choice["finish_reason"] == "stop"
    u = body["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert 0 < u["reasoning_tokens"] < u["completion_tokens"]
    # The same prompt always gives the same answer length (seeded by the prompt).
    again = _chat(sim.base_url, "What is the capital of France?", max_tokens=32768 - 100).json()
    assert again["usage"] == u and again["choices"][0]["message"] == msg


def test_max_tokens_is_honoured_exactly_and_a_cut_trace_leaves_content_empty(sim_server):
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    for key in ("max_tokens", "max_completion_tokens"):
        body = _chat(sim.base_url, "Prove that there are infinitely many primes.",
                     **{key: 17}).json()
        choice = body["choices"][0]
        assert body["usage"]["completion_tokens"] == 17
        assert choice["finish_reason"] == "length"
        # Cut off inside the thinking part: everything is reasoning, the answer is empty.
        assert choice["message"]["content"] == ""
        assert len(choice["message"]["reasoning_content"].split()) == 17
    # max_completion_tokens wins over max_tokens, as in SGLang.
    both = _chat(sim.base_url, "Hi", max_tokens=50, max_completion_tokens=9).json()
    assert both["usage"]["completion_tokens"] == 9


def test_thinking_off_puts_everything_in_content(sim_server):
    sim = sim_server("--sim-instant")
    r = httpx.post(sim.base_url + "/v1/chat/completions", trust_env=False, timeout=30, json={
        "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 20,
        "chat_template_kwargs": {"enable_thinking": False}}).json()
    msg = r["choices"][0]["message"]
    assert msg["reasoning_content"] is None and len(msg["content"].split()) == 20
    assert r["usage"]["reasoning_tokens"] == 0


def _assert_sglang_error(r: httpx.Response, fragment: str,
                         kind: str = "BadRequestError") -> None:
    assert r.status_code == 400
    body = r.json()
    assert body.keys() == {"object", "message", "type", "param", "code"}
    assert (body["object"], body["type"], body["param"], body["code"]) == \
        ("error", kind, None, 400)
    assert fragment in body["message"]


def test_prompt_longer_than_the_context_is_a_400_with_sglangs_body(sim_server):
    sim = sim_server("--sim-instant", "--context-length", "1024")
    _assert_sglang_error(_chat(sim.base_url, "word " * 5000, max_tokens=10),
                         "is longer than the model's context length (1024 tokens)")
    # Prompt plus the completion budget past the context: refused too...
    _assert_sglang_error(_chat(sim.base_url, "word " * 400, max_tokens=1000),
                         "Requested token count exceeds the model's maximum context length")
    # ...and garbage bodies get the same error shape, typed as FastAPI validation errors
    # are ("Bad Request", sglang/srt/entrypoints/http_server.py).
    r = httpx.post(sim.base_url + "/v1/chat/completions", content=b"{not json",
                   trust_env=False, timeout=5)
    _assert_sglang_error(r, "JSON", "Bad Request")
    r = httpx.post(sim.base_url + "/v1/chat/completions", json={"messages": []},
                   trust_env=False, timeout=5)
    _assert_sglang_error(r, "messages", "Bad Request")


def test_auto_truncate_shrinks_the_budget_instead(sim_server):
    sim = sim_server("--sim-instant", "--context-length", "1024", "--allow-auto-truncate")
    r = _chat(sim.base_url, "word " * 400, max_tokens=1000)
    assert r.status_code == 200
    u = r.json()["usage"]
    assert u["prompt_tokens"] + u["completion_tokens"] <= 1024


def test_metrics_when_enabled(sim_server):
    plain = sim_server("--sim-instant")
    assert httpx.get(plain.base_url + "/metrics", trust_env=False).status_code == 404
    sim = sim_server("--sim-instant", "--enable-metrics")
    _chat(sim.base_url, "Count to three.", max_tokens=40)
    text = httpx.get(sim.base_url + "/metrics", trust_env=False).text
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name.split("{")[0]] = float(value)
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput",
                 "sglang:generation_tokens_total"):
        assert name in values, name
    # 40 tokens, plus the 8 of SGLang's own warmup request.
    assert values["sglang:generation_tokens_total"] == 40 + 8
    assert values["sglang:num_running_reqs"] == 0
    assert _chat(sim.base_url, "Hi", max_tokens=5).status_code == 200
