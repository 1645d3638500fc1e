"""The simulator holds to SGLang 0.5.23, fact by fact.

Each test is one fact read from SGLang 0.5.23's own source; its docstring names the file
(path under `sglang/`) the fact comes from. Every test runs the real simulator process
(`python -m supervisor.sim`) on loopback.
"""

from __future__ import annotations

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
    import threading

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
