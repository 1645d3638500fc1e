"""/metrics as SGLang serves it with --enable-metrics: names, types, help texts, labels, and
the values that follow the batch.

Part of the simulator's fidelity tests (test_sglang_fidelity_*.py): each test is one fact
read from SGLang 0.5.23's own source, its docstring naming the file (path under `sglang/`);
every test runs the real simulator process (`python -m supervisor.sim`) on loopback.
"""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.sim.sglang_calls import SCHED_LABELS, TOKENIZER_LABELS, chat, families, get


def test_metrics_absent_without_enable_metrics(sim_server):
    """sglang/srt/entrypoints/http_server.py: the /metrics route is added only when
    enable_metrics is set (add_prometheus_middleware); otherwise the path is a 404."""
    sim = sim_server("--sim-instant")
    assert get(sim.base_url, "/metrics").status_code == 404


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
    assert chat(sim.base_url, max_tokens=8).status_code == 200
    fams = families(get(sim.base_url, "/metrics").text)
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
    fams = families(get(sim.base_url, "/metrics").text)
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
        fam = families(get(sim.base_url, "/metrics").text)[name]
        assert (fam.type, fam.documentation) == ("counter", help_text)
        [s] = [s for s in fam.samples if s.name == name + "_total"]
        return s

    before = sample()
    assert before.value == {"sglang:prompt_tokens": 6, "sglang:generation_tokens": 8,
                            "sglang:num_requests": 1}[name]
    usage = [chat(sim.base_url, f"question {i}", max_tokens=50).json()["usage"]
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
    pool_stats_observer.py): the running requests' prompt and output tokens. A small pool
    (--max-total-tokens 1000) makes it visible."""
    sim = sim_server("--enable-metrics", "--max-running-requests", "2",
                     "--sim-tokens-per-s", "20", "--max-total-tokens", "1000",
                     "--context-length", "4096")
    threads = [threading.Thread(target=chat, args=(sim.base_url, f"q{i}"),
                                kwargs={"max_tokens": 60}) for i in range(5)]
    for t in threads:
        t.start()
    try:
        seen = None
        for _ in range(200):
            fams = families(get(sim.base_url, "/metrics").text)
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
        assert chat(sim.base_url, max_tokens=60).status_code == 200
    total = 0.0
    for _ in range(100):
        fams = families(get(sim.base_url, "/metrics").text)
        fam = fams.get("sglang:num_retracted_requests")    # appears at the first retraction
        total = fam.samples[0].value if fam is not None else 0.0
        if total >= 1 and "KV cache pool is full. Retract requests. #retracted_reqs: " \
                in sim.log_text():
            break
        chat(sim.base_url, max_tokens=60)
    assert total >= 1
    assert (fam.type, fam.documentation) == ("counter", "Total number of retracted requests.")
    assert set(fam.samples[0].labels) == SCHED_LABELS
    assert "KV cache pool is full. Retract requests. #retracted_reqs: " in sim.log_text()
    assert sim.proc.poll() is None
    assert get(sim.base_url, "/health").status_code == 200
