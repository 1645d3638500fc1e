"""The simulator holds to SGLang 0.5.23, fact by fact.

Each test is one fact read from SGLang 0.5.23's own source; its docstring names the file
(path under `sglang/`) the fact comes from. Every test runs the real simulator process
(`python -m supervisor.sim`) on loopback.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

SCHED_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
TOKENIZER_LABELS = {"model_name", "engine_type", "is_streaming"}


def _get(base: str, path: str) -> httpx.Response:
    return httpx.get(base + path, timeout=10, trust_env=False)


def _chat(base: str, content: str = "Name three rivers.", **extra) -> httpx.Response:
    body = {"model": "sim/test-model", "messages": [{"role": "user", "content": content}],
            **extra}
    return httpx.post(base + "/v1/chat/completions", json=body, timeout=30, trust_env=False)


def _families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


# --------------------------------------------------------------------------- /metrics


def test_metrics_absent_without_enable_metrics(sim_server):
    """sglang/srt/entrypoints/http_server.py: the /metrics route is added only when
    enable_metrics is set (add_prometheus_middleware); otherwise the path is a 404."""
    sim = sim_server("--sim-instant")
    assert _get(sim.base_url, "/metrics").status_code == 404


def test_metrics_served_at_metrics_without_redirect(sim_server):
    """sglang/srt/utils/common.py add_prometheus_middleware: mounted with
    path_regex ^/metrics(?P<path>.*)$ so /metrics answers 200 itself, no 307 to /metrics/."""
    sim = sim_server("--sim-instant", "--enable-metrics")
    r = httpx.get(sim.base_url + "/metrics", timeout=10, trust_env=False, follow_redirects=False)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize("name,kind,help_text", [
    ("sglang:num_running_reqs", "gauge", "The number of running requests."),
    ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue."),
    ("sglang:token_usage", "gauge", "The token usage."),
    ("sglang:gen_throughput", "gauge", "The generation throughput (token/s)."),
    ("sglang:num_retracted_reqs", "gauge", "The number of retracted requests."),
    ("sglang:max_total_num_tokens", "gauge",
     "Maximum total number of tokens in the KV cache pool."),
])
def test_scheduler_metric_names_types_and_labels(sim_server, name, kind, help_text):
    """sglang/srt/observability/metrics_collector.py SchedulerMetricsCollector: names, help
    texts and types; labels {model_name, engine_type, tp_rank, pp_rank, moe_ep_rank}
    (create_context builds them; engine_type "unified" without PD disaggregation,
    sglang/srt/disaggregation/utils.py)."""
    sim = sim_server("--sim-instant", "--enable-metrics", "--served-model-name", "served-name")
    assert _chat(sim.base_url, max_tokens=8).status_code == 200
    fams = _families(_get(sim.base_url, "/metrics").text)
    fam = fams[name]
    assert (fam.type, fam.documentation) == (kind, help_text)
    sample = fam.samples[0]
    labels = set(sample.labels) - {"pid"}
    assert labels == SCHED_LABELS
    assert sample.labels["model_name"] == "served-name"
    assert (sample.labels["engine_type"], sample.labels["tp_rank"], sample.labels["pp_rank"],
            sample.labels["moe_ep_rank"]) == ("unified", "0", "0", "0")


def test_default_mode_gauge_carries_pid_label(sim_server):
    """sglang/srt/utils/common.py runs prometheus_client in multiprocess mode, and
    sglang/srt/observability/metrics_collector.py leaves sglang:num_retracted_reqs on the
    default multiprocess_mode ("all"), so it carries a pid label; the "mostrecent" gauges
    (num_running_reqs) do not."""
    sim = sim_server("--sim-instant", "--enable-metrics")
    fams = _families(_get(sim.base_url, "/metrics").text)
    assert fams["sglang:num_retracted_reqs"].samples[0].labels["pid"] == str(sim.proc.pid)
    assert "pid" not in fams["sglang:num_running_reqs"].samples[0].labels


@pytest.mark.parametrize("name,help_text", [
    ("sglang:prompt_tokens", "Number of prefill tokens processed."),
    ("sglang:generation_tokens", "Number of generation tokens processed."),
    ("sglang:num_requests", "Number of requests processed."),
])
def test_tokenizer_counters_count_finished_requests(sim_server, name, help_text):
    """sglang/srt/observability/metrics_collector.py TokenizerMetricsCollector:
    sglang:prompt_tokens_total / generation_tokens_total / num_requests_total are counters
    with labels {model_name, engine_type} + is_streaming, incremented per finished request
    (observe_one_finished_request). They start at SGLang's own warmup request
    (sglang/srt/entrypoints/http_server.py _execute_server_warmup: 8 new tokens)."""
    sim = sim_server("--sim-instant", "--enable-metrics")

    def sample():
        fam = _families(_get(sim.base_url, "/metrics").text)[name]
        assert (fam.type, fam.documentation) == ("counter", help_text)
        [s] = [s for s in fam.samples if s.name == name + "_total"]
        return s

    before = sample()
    assert before.value == {"sglang:prompt_tokens": 6, "sglang:generation_tokens": 8,
                            "sglang:num_requests": 1}[name]
    usage = [_chat(sim.base_url, f"question {i}", max_tokens=50).json()["usage"]
             for i in range(3)]
    after = sample()
    assert set(after.labels) == TOKENIZER_LABELS
    assert after.labels["is_streaming"] == "false"
    expected = {"sglang:prompt_tokens": sum(u["prompt_tokens"] for u in usage),
                "sglang:generation_tokens": sum(u["completion_tokens"] for u in usage),
                "sglang:num_requests": 3}[name]
    assert after.value - before.value == expected


def test_running_queued_and_token_usage_follow_the_batch(sim_server):
    """sglang/srt/observability/metrics_collector.py log_stats: num_running_reqs and
    num_queue_reqs are the batch and the waiting queue; token_usage is the used share of the
    KV pool (0..1), rounded to 2 places (sglang/srt/managers/scheduler_components/
    pool_stats_observer.py). A small pool (--mem-fraction-static 0.01) makes it visible."""
    sim = sim_server("--enable-metrics", "--max-running-requests", "2",
                     "--sim-tokens-per-s", "20", "--mem-fraction-static", "0.01",
                     "--context-length", "4096")
    threads = [threading.Thread(target=_chat, args=(sim.base_url, f"q{i}"),
                                kwargs={"max_tokens": 60}) for i in range(5)]
    for t in threads:
        t.start()
    try:
        seen = None
        for _ in range(200):
            fams = _families(_get(sim.base_url, "/metrics").text)
            value = {n: fams[n].samples[0].value for n in
                     ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage")}
            if value["sglang:num_running_reqs"] == 2 and value["sglang:num_queue_reqs"] == 3:
                seen = value
                break
            threading.Event().wait(0.02)
        assert seen is not None, "never saw 2 running and 3 queued"
        assert 0 < seen["sglang:token_usage"] <= 1
    finally:
        for t in threads:
            t.join(timeout=30)


def test_retraction_counts_and_log_line_and_server_keeps_serving(sim_server):
    """sglang/srt/managers/scheduler.py: on a full KV pool the scheduler logs
    "KV cache pool is full. Retract requests. #retracted_reqs: N, #new_tokens_gained: ..."
    and counts them (increment_retracted_reqs, sglang/srt/observability/metrics_collector.py);
    requests go back to the queue and the server goes on answering. The counter is named
    sglang:num_retracted_requests_total ("requests", SGLang's way around a name clash)."""
    sim = sim_server("--enable-metrics", "--sim-fault", "retract", "--sim-time-scale", "20",
                     "--sim-tokens-per-s", "100")
    for _ in range(3):
        assert _chat(sim.base_url, max_tokens=60).status_code == 200
    total = 0.0
    for _ in range(100):
        fams = _families(_get(sim.base_url, "/metrics").text)
        fam = fams.get("sglang:num_retracted_requests")    # appears at the first retraction
        total = fam.samples[0].value if fam is not None else 0.0
        if total >= 1 and "KV cache pool is full. Retract requests. #retracted_reqs: " \
                in sim.log_text():
            break
        _chat(sim.base_url, max_tokens=60)
    assert total >= 1
    assert (fam.type, fam.documentation) == ("counter", "Total number of retracted requests.")
    assert set(fam.samples[0].labels) == SCHED_LABELS
    assert "KV cache pool is full. Retract requests. #retracted_reqs: " in sim.log_text()
    assert sim.proc.poll() is None
    assert _get(sim.base_url, "/health").status_code == 200


# --------------------------------------------------------------------------- /server_info


def test_server_info_effective_max_running_requests_from_flag(sim_server):
    """sglang/srt/managers/scheduler_components/internal_state.py: each internal state
    carries effective_max_running_requests_per_dp = scheduler.max_running_requests, which
    sglang/srt/mem_cache/kv_cache_configurator.py resolve_max_num_reqs takes from the flag
    (capped at half the KV pool)."""
    sim = sim_server("--sim-instant", "--max-running-requests", "48")
    info = _get(sim.base_url, "/server_info").json()
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 48
    assert info["max_running_requests"] == 48


def test_server_info_effective_max_running_requests_without_flag(sim_server):
    """sglang/srt/mem_cache/kv_cache_configurator.py resolve_max_num_reqs: with no
    --max-running-requests, pool / context_len * 512 clamped to [2048, 4096] (and at most
    half the pool); the top-level max_running_requests stays null (the raw flag)."""
    sim = sim_server("--sim-instant", "--context-length", "32768")
    info = _get(sim.base_url, "/server_info").json()
    pool = info["max_total_num_tokens"]
    expected = min(max(min(int(pool / 32768 * 512), 4096), 2048), pool // 2)
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == expected
    assert info["max_running_requests"] is None


def test_server_info_effective_max_running_requests_capped_by_mamba_cache(sim_server):
    """sglang/srt/mem_cache/kv_cache_configurator.py resolve_max_num_reqs: a hybrid (mamba)
    model caps it at max_mamba_cache_size // 3 (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO)."""
    sim = sim_server("--sim-instant", "--max-running-requests", "100",
                     "--max-mamba-cache-size", "200")
    info = _get(sim.base_url, "/server_info").json()
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 66


def test_server_info_version_and_shape(sim_server):
    """sglang/srt/entrypoints/http_server.py server_info: server args at top level plus
    internal_states (one per DP rank), version and frontend "python"."""
    sim = sim_server("--sim-instant")
    info = _get(sim.base_url, "/server_info").json()
    assert info["version"] == "0.5.23 (simulated)"
    assert info["frontend"] == "python"
    assert isinstance(info["internal_states"], list) and len(info["internal_states"]) == 1
    assert "last_gen_throughput" in info["internal_states"][0]


# --------------------------------------------------------------------------- launch flags


def _launch(*flags: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "supervisor.sim", *flags],
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_unknown_flag_exits_2_with_argparse_message():
    """sglang/srt/server_args.py prepare_server_args: argparse.ArgumentParser(prog="sglang
    serve").parse_args, so an unknown flag exits 2 with "unrecognized arguments"."""
    r = _launch("--model-path", "m", "--port", "1", "--no-such-flag", "3")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == \
        "sglang serve: error: unrecognized arguments: --no-such-flag 3"


def test_cuda_graph_max_bs_is_an_ambiguous_option_in_0_5_23():
    """sglang/srt/arg_groups/fields/exec_.py has only --cuda-graph-max-bs-decode and
    --cuda-graph-max-bs-prefill; argparse's default allow_abbrev makes the old
    --cuda-graph-max-bs a prefix of both: "ambiguous option", exit 2."""
    r = _launch("--model-path", "m", "--port", "1", "--cuda-graph-max-bs", "64")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")


def test_unique_prefix_is_accepted(sim_server):
    """argparse allow_abbrev (on in sglang/srt/server_args.py's parser): a unique prefix
    such as --max-running is --max-running-requests."""
    sim = sim_server("--sim-instant", "--max-running", "5", "--cuda-graph-max-bs-decode", "8")
    info = _get(sim.base_url, "/server_info").json()
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 5


def test_model_path_is_required():
    """sglang/srt/arg_groups/fields/model.py: model_path has no default, so argparse
    requires --model-path (alias --model)."""
    r = _launch("--port", "1")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == \
        "sglang serve: error: the following arguments are required: --model-path/--model"


def test_reasoning_parser_choices():
    """sglang/srt/server_args.py add_cli_args: --reasoning-parser choices are "auto" plus
    sglang/srt/parser/reasoning_parser_names.py."""
    r = _launch("--model-path", "m", "--port", "1", "--reasoning-parser", "qwen9")
    assert r.returncode == 2
    assert "argument --reasoning-parser: invalid choice: 'qwen9'" in r.stderr


# --------------------------------------------------------------------------- startup


def test_port_refuses_connections_while_loading_then_503_in_warmup_then_200(sim_server):
    """sglang/srt/entrypoints/http_server.py launch_server: uvicorn starts only after the
    scheduler has loaded the model (port closed meanwhile); health_generate answers 503 while
    the status is Starting (the warmup request runs), then 200 once Up."""
    sim = sim_server("--sim-startup-s", "2", wait=False)
    seen: list[object] = []
    for _ in range(400):
        try:
            code = httpx.get(sim.base_url + "/health_generate", timeout=5,
                             trust_env=False).status_code
        except httpx.ConnectError:
            code = "refused"
        if not seen or seen[-1] != code:
            seen.append(code)
        if code == 200:
            break
        threading.Event().wait(0.02)
    assert seen == ["refused", 503, 200]
    log = sim.log_text()
    assert log.index("max_total_num_tokens=") < log.index("The server is fired up and ready")


def test_health_generate_never_answers_200_in_under_a_second(sim_server):
    """sglang/srt/entrypoints/http_server.py health_generate: it sends a one-token request
    and sleeps 1 s before looking for output, so a probe with a timeout under 1 s never sees
    200 (and /health is the same handler)."""
    sim = sim_server("--sim-instant")
    for path in ("/health_generate", "/health"):
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(sim.base_url + path, timeout=0.5, trust_env=False)
        assert _get(sim.base_url, path).status_code == 200


# --------------------------------------------------------------------------- chat completions

THINK = {"separate_reasoning": True, "chat_template_kwargs": {"enable_thinking": True}}


def test_without_reasoning_parser_the_think_markers_stay_in_content(sim_server):
    """sglang/srt/entrypoints/openai/serving_chat.py _build_chat_response: reasoning is split
    only `if self.reasoning_parser and request.separate_reasoning`; otherwise the raw text,
    <think> markers included, is the content and reasoning_content is null."""
    sim = sim_server("--sim-instant")
    body = _chat(sim.base_url, "Why is the sky blue?", max_tokens=30000, **THINK).json()
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
    body = _chat(sim.base_url, "Why is the sky blue?", max_tokens=30000,
                 separate_reasoning=False,
                 chat_template_kwargs={"enable_thinking": True}).json()
    assert "</think>" in body["choices"][0]["message"]["content"]


def test_with_reasoning_parser_the_trace_is_split(sim_server):
    """sglang/srt/parser/reasoning_parser.py detect_and_parse: reasoning is the text before
    </think> (leading <think> dropped), content what follows, neither stripped."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    body = _chat(sim.base_url, "Why is the sky blue?", max_tokens=30000, **THINK).json()
    msg = body["choices"][0]["message"]
    assert msg["reasoning_content"].startswith("\n") and "<think>" not in msg["reasoning_content"]
    assert msg["content"].startswith("\n\n") and msg["content"].strip()
    assert "</think>" not in msg["content"]


def test_cut_inside_thinking_gives_empty_content_and_all_text_in_reasoning(sim_server):
    """sglang/srt/parser/reasoning_parser.py: no </think> in the text means "reasoning was
    truncated before end token": all of it is reasoning_text; serving_chat.py then sends
    content "" (never null)."""
    sim = sim_server("--sim-instant", "--reasoning-parser", "qwen3")
    body = _chat(sim.base_url, "Prove Fermat's last theorem.", max_tokens=12, **THINK).json()
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
    body = _chat(sim.base_url, "Say hi.", max_tokens=30000, **THINK).json()
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
    on = _chat(sim.base_url, "Explain tides.", max_tokens=30000, **THINK).json()["usage"]
    assert list(on) == ["prompt_tokens", "total_tokens", "completion_tokens",
                        "prompt_tokens_details", "reasoning_tokens",
                        "completion_tokens_details"]
    assert on["reasoning_tokens"] > 0
    assert on["completion_tokens_details"] == {"reasoning_tokens": on["reasoning_tokens"]}
    off = _chat(sim.base_url, "Explain tides.", max_tokens=50,
                chat_template_kwargs={"enable_thinking": False}).json()["usage"]
    assert off["reasoning_tokens"] == 0 and off["completion_tokens_details"] is None


def test_model_defaults_to_default_and_is_echoed(sim_server):
    """sglang/srt/entrypoints/openai/protocol.py: ChatCompletionRequest.model defaults to
    DEFAULT_MODEL_NAME "default"; the response echoes request.model."""
    sim = sim_server("--sim-instant")
    r = httpx.post(sim.base_url + "/v1/chat/completions", trust_env=False, timeout=30,
                   json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    assert r.json()["model"] == "default"
    assert _chat(sim.base_url, max_tokens=4).json()["model"] == "sim/test-model"


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
    msg = _error(_chat(sim.base_url, "x" * 376))
    assert msg == "The input (100 tokens) is longer than the model's context length (100 tokens)."
    assert _chat(sim.base_url, "x" * 372, max_tokens=1).status_code == 200   # 99 tokens


def test_input_plus_max_tokens_over_context_is_refused_but_equal_is_fine(sim_server):
    """sglang/srt/managers/tokenizer_manager.py _validate_one_request: the total check is
    `(max_new_tokens + input_token_num) > _max_req_len` (strictly greater)."""
    sim = sim_server("--sim-instant", "--context-length", "100")
    ok = _chat(sim.base_url, "x" * 160, max_tokens=54)          # 46 + 54 = 100: allowed
    assert ok.status_code == 200
    msg = _error(_chat(sim.base_url, "x" * 160, max_tokens=55))
    assert msg == ("Requested token count exceeds the model's maximum context length of 100 "
                   "tokens. You requested a total of 101 tokens: 46 tokens from the input "
                   "messages and 55 tokens for the completion. Please reduce the number of "
                   "tokens in the input messages or the completion to fit within the limit.")


def test_max_completion_tokens_over_context_is_refused_first(sim_server):
    """sglang/srt/entrypoints/openai/serving_chat.py _validate_request: max_completion_tokens
    (or max_tokens) above the context length is refused before tokenizing, with SGLang's
    message (no space after the period)."""
    sim = sim_server("--sim-instant", "--context-length", "100")
    msg = _error(_chat(sim.base_url, "x" * 800, max_completion_tokens=101))
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


# --------------------------------------------------------------------------- failures


def test_crash_logs_scheduler_exception_then_sigquit_and_ends_by_sigkill(sim_server):
    """sglang/srt/managers/scheduler.py run_scheduler_process logs "Scheduler hit an
    exception: <traceback>" and sends SIGQUIT to the launcher; the running-phase handler
    (sglang/srt/managers/tokenizer_manager.py) logs "SIGQUIT received. signum=None,
    frame=None. It usually means one child failed." and kill_process_tree
    (sglang/srt/utils/common.py) SIGKILLs the tree, itself last: the exit is signal 9."""
    sim = sim_server("--sim-instant")
    httpx.post(sim.base_url + "/sim/fault", json={"fault": "crash"}, timeout=5, trust_env=False)
    assert sim.proc.wait(timeout=15) == -signal.SIGKILL
    log = sim.log_text()
    first = log.index("Scheduler hit an exception: Traceback (most recent call last):")
    assert first < log.index("SIGQUIT received. signum=None, frame=None. It usually means "
                             "one child failed.")


def test_retraction_lines_are_harmless(sim_server):
    """sglang/srt/managers/scheduler.py: "KV cache pool is full. Retract requests." is a
    warning; the retracted requests are queued again and finish normally."""
    sim = sim_server("--sim-fault", "retract", "--sim-time-scale", "40",
                     "--sim-tokens-per-s", "100", "--reasoning-parser", "qwen3")
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        _chat(sim.base_url, f"prompt {i}", max_tokens=400, **THINK).status_code))
        for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [200] * 6
    assert "KV cache pool is full. Retract requests." in sim.log_text()
    assert sim.proc.poll() is None


# --------------------------------------------------------------------------- streaming


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
    import json

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
    whole = _chat(sim.base_url, "Why do cats purr?", max_tokens=30000, **THINK).json()
    msg = whole["choices"][0]["message"]
    assert (reasoning, content) == (msg["reasoning_content"], msg["content"])
    assert usage["usage"] == whole["usage"]


def test_stream_without_include_usage_has_no_usage_chunk(sim_server):
    """sglang/srt/entrypoints/openai/utils.py should_include_usage: off unless
    stream_options.include_usage (or the server's default) asks for it."""
    import json

    sim = sim_server("--sim-instant")
    code, events = _stream(sim.base_url, max_tokens=20)
    chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert all(c["choices"] for c in chunks) and "usage" not in chunks[-1]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_stream_validation_error_is_plain_json_400(sim_server):
    """sglang/srt/entrypoints/openai/serving_chat.py _handle_streaming_request kick-starts the
    generator before sending 200, so a length error is an ordinary JSON 400."""
    import json

    sim = sim_server("--sim-instant", "--context-length", "100")
    code, [text] = _stream(sim.base_url, max_tokens=99)
    assert code == 400
    assert json.loads(text)["message"].startswith("Requested token count exceeds")


def test_stream_counts_as_streaming_in_metrics(sim_server):
    """sglang/srt/observability/metrics_collector.py observe_one_finished_request:
    is_streaming="true" for a streamed request."""
    sim = sim_server("--sim-instant", "--enable-metrics")
    _stream(sim.base_url, max_tokens=20)
    fam = _families(_get(sim.base_url, "/metrics").text)["sglang:generation_tokens"]
    [s] = [s for s in fam.samples if s.name.endswith("_total")
           and s.labels["is_streaming"] == "true"]
    assert s.value == 20


# --------------------------------------------------------------------------- /generate, abort


def _generate(base: str, **body) -> httpx.Response:
    return httpx.post(base + "/generate", json=body, timeout=60, trust_env=False)


def _wait_running(base: str, running: int, queued: int = 0) -> None:
    for _ in range(400):
        state = _get(base, "/sim/state").json()
        if (state["running"], state["queued"]) == (running, queued):
            return
        threading.Event().wait(0.02)
    raise AssertionError(f"never saw {running} running and {queued} queued")


def test_generate_shape_and_default_max_new_tokens(sim_server):
    """sglang/srt/entrypoints/http_server.py /generate → {text, output_ids, meta_info};
    meta_info keys from sglang/srt/managers/tokenizer_manager.py _handle_batch_output;
    max_new_tokens defaults to 128 (sglang/srt/sampling/sampling_params.py); finish_reason is
    FINISH_LENGTH.to_json() {"type": "length", "length": N}
    (sglang/srt/managers/schedule_batch.py)."""
    sim = sim_server("--sim-instant")
    out = _generate(sim.base_url, text="Once upon a time", rid="r-1").json()
    meta = out["meta_info"]
    assert set(out) == {"text", "output_ids", "meta_info"}
    assert meta["id"] == "r-1" and len(out["output_ids"]) == meta["completion_tokens"]
    assert {"prompt_tokens", "weight_version", "num_retractions", "reasoning_tokens",
            "completion_tokens", "cached_tokens", "e2e_latency"} <= set(meta)
    if meta["finish_reason"]["type"] == "length":
        assert meta["finish_reason"] == {"type": "length", "length": 128}
    short = _generate(sim.base_url, text="Once upon a time",
                      sampling_params={"max_new_tokens": 7}).json()
    assert short["meta_info"]["finish_reason"] == {"type": "length", "length": 7}


def test_duplicate_rid_is_refused(sim_server):
    """sglang/srt/managers/tokenizer_manager.py: "Duplicate request ID detected: <rid>" for a
    rid already in flight; http_server.py answers {"error": {"message"}} with 400."""
    sim = sim_server("--sim-tokens-per-s", "20")
    t = threading.Thread(target=_generate, args=(sim.base_url,),
                         kwargs={"text": "long", "rid": "dup",
                                 "sampling_params": {"max_new_tokens": 60}})
    t.start()
    try:
        _wait_running(sim.base_url, 1)
        r = _generate(sim.base_url, text="again", rid="dup")
        assert r.status_code == 400
        assert r.json() == {"error": {"message": "Duplicate request ID detected: dup"}}
    finally:
        httpx.post(sim.base_url + "/abort_request", json={"abort_all": True}, timeout=5,
                   trust_env=False)
        t.join(timeout=30)


def test_abort_request_running_and_queued(sim_server):
    """sglang/srt/entrypoints/http_server.py /abort_request {rid, abort_all} → 200; the
    scheduler (sglang/srt/managers/scheduler.py abort_request) sets FINISH_ABORT() on a running
    request ({"type": "abort", "message": "Aborted", "status_code": null, "err_type": null},
    it keeps what it produced) and pops a queued one, which the tokenizer manager reports as
    "Abort in waiting queue" with no output."""
    sim = sim_server("--sim-tokens-per-s", "20", "--max-running-requests", "1")
    results: dict[str, dict] = {}

    def run(rid: str) -> None:
        results[rid] = _generate(sim.base_url, text=f"prompt {rid}", rid=rid,
                                 sampling_params={"max_new_tokens": 400}).json()

    threads = [threading.Thread(target=run, args=(rid,)) for rid in ("run-a", "queued-b")]
    threads[0].start()
    _wait_running(sim.base_url, 1)
    threads[1].start()
    _wait_running(sim.base_url, 1, 1)
    for rid in ("queued-b", "run-a"):
        r = httpx.post(sim.base_url + "/abort_request", json={"rid": rid}, timeout=5,
                       trust_env=False)
        assert r.status_code == 200 and r.content == b""
    for t in threads:
        t.join(timeout=30)
    running, queued = results["run-a"]["meta_info"], results["queued-b"]["meta_info"]
    assert running["finish_reason"] == {"type": "abort", "message": "Aborted",
                                        "status_code": None, "err_type": None}
    assert 0 < running["completion_tokens"] < 400
    assert queued["finish_reason"] == {"type": "abort", "message": "Abort in waiting queue"}
    assert queued["completion_tokens"] == 0 and results["queued-b"]["text"] == ""


def test_abort_unknown_rid_is_ignored_and_prefix_aborts_the_family(sim_server):
    """sglang/srt/managers/tokenizer_manager.py abort_request: a rid not in flight is ignored
    (one tokenizer worker); the scheduler then aborts every request whose rid starts with
    it (req.rid.startswith(recv_req.rid))."""
    sim = sim_server("--sim-tokens-per-s", "20")
    results: dict[str, dict] = {}

    def run(rid: str) -> None:
        results[rid] = _generate(sim.base_url, text=rid, rid=rid,
                                 sampling_params={"max_new_tokens": 200}).json()

    threads = [threading.Thread(target=run, args=(rid,)) for rid in ("job", "job-2", "other")]
    for t in threads:
        t.start()
    _wait_running(sim.base_url, 3)
    httpx.post(sim.base_url + "/abort_request", json={"rid": "jo"}, timeout=5, trust_env=False)
    threading.Event().wait(0.2)
    assert _get(sim.base_url, "/sim/state").json()["running"] == 3       # "jo": not in flight
    httpx.post(sim.base_url + "/abort_request", json={"rid": "job"}, timeout=5, trust_env=False)
    threads[0].join(timeout=30)
    threads[1].join(timeout=30)
    assert results["job"]["meta_info"]["finish_reason"]["type"] == "abort"
    assert results["job-2"]["meta_info"]["finish_reason"]["type"] == "abort"
    httpx.post(sim.base_url + "/abort_request", json={"abort_all": True}, timeout=5,
               trust_env=False)
    threads[2].join(timeout=30)
    assert results["other"]["meta_info"]["finish_reason"]["type"] == "abort"


def test_chat_rid_is_the_response_id_and_abort_ends_it_with_abort(sim_server):
    """sglang/srt/entrypoints/openai/protocol.py ChatCompletionRequest.rid becomes the request
    id (the response's id); an /abort_request'ed chat completion answers 200 with
    finish_reason "abort" (a graceful abort has no status_code,
    sglang/srt/managers/tokenizer_manager.py _handle_abort_finish_reason)."""
    sim = sim_server("--sim-tokens-per-s", "20", "--reasoning-parser", "qwen3")
    out: dict[str, httpx.Response] = {}
    t = threading.Thread(target=lambda: out.setdefault("r", _chat(
        sim.base_url, "Tell me a long story.", max_tokens=2000, rid="chat-7", **THINK)))
    t.start()
    _wait_running(sim.base_url, 1)
    httpx.post(sim.base_url + "/abort_request", json={"rid": "chat-7"}, timeout=5,
               trust_env=False)
    t.join(timeout=30)
    body = out["r"].json()
    assert out["r"].status_code == 200 and body["id"] == "chat-7"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "abort" and choice["matched_stop"] is None
    assert 0 < body["usage"]["completion_tokens"] < 2000


def test_data_parallel_has_one_internal_state_and_slot_set_per_rank(sim_server):
    """sglang/srt/entrypoints/http_server.py server_info: internal_states is one entry per DP
    rank (each scheduler's own effective_max_running_requests_per_dp, the flag itself without
    DP attention, sglang/srt/mem_cache/kv_cache_configurator.py); the scheduler metrics gain
    a dp_rank label (sglang/srt/observability/metrics_collector.py)."""
    sim = sim_server("--sim-instant", "--dp-size", "2", "--max-running-requests", "3",
                     "--enable-metrics")
    states = _get(sim.base_url, "/server_info").json()["internal_states"]
    assert [s["effective_max_running_requests_per_dp"] for s in states] == [3, 3]
    fams = _families(_get(sim.base_url, "/metrics").text)
    assert fams["sglang:num_running_reqs"].samples[0].labels["dp_rank"] == "0"
