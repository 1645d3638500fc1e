"""Reading SGLang's /metrics text: names, labels and the sum over ranks held to SGLang 0.5.23
(sglang/srt/observability/metrics_collector.py, `SchedulerMetricsCollector` and
`_log_gauge_queue_count`; the route is sglang/srt/utils/common.py `add_prometheus_middleware`,
a prometheus_client multiprocess registry)."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from supervisor.sglang.metrics import (
    MetricsParseError,
    SglangMetrics,
    metrics_enabled,
    parse_sglang_metrics,
)

LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")


def _ranks(tp: int, **extra: str) -> str:
    labels = {"engine_type": "unified", "model_name": "Qwen/Qwen3-8B", "moe_ep_rank": "0",
              "pp_rank": "0", "tp_rank": str(tp), **extra}
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


# What a TP=2 server with --enable-metrics-for-all-schedulers serves (both ranks report the
# same batch), written the way prometheus_client's multiprocess collector writes it: HELP and
# TYPE lines, the counter's family without `_total`, histograms with their buckets, and the
# tokenizer manager's own metrics beside the scheduler's.
TP2_TEXT = f"""\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{_ranks(0)} 48.0
sglang:num_running_reqs{_ranks(1)} 48.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{_ranks(0)} 7.0
sglang:num_queue_reqs{_ranks(1)} 7.0
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{_ranks(0)} 2210.5
sglang:gen_throughput{_ranks(1)} 2210.5
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{_ranks(0)} 0.91
sglang:token_usage{_ranks(1)} 0.93
# HELP sglang:num_retracted_reqs The number of retracted requests.
# TYPE sglang:num_retracted_reqs gauge
sglang:num_retracted_reqs{_ranks(0, pid="4242")} 3.0
# HELP sglang:num_retracted_requests_total Total number of retracted requests.
# TYPE sglang:num_retracted_requests counter
sglang:num_retracted_requests_total{_ranks(0)} 17.0
sglang:num_retracted_requests_total{_ranks(1)} 17.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{{le="0.1",model_name="Qwen/Qwen3-8B"}} 10.0
sglang:time_to_first_token_seconds_bucket{{le="+Inf",model_name="Qwen/Qwen3-8B"}} 12.0
sglang:time_to_first_token_seconds_count{{model_name="Qwen/Qwen3-8B"}} 12.0
sglang:time_to_first_token_seconds_sum{{model_name="Qwen/Qwen3-8B"}} 0.8
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{{model_name="Qwen/Qwen3-8B"}} 912.0
"""


def test_tensor_parallel_ranks_report_one_batch_not_two() -> None:
    """Every TP rank of one scheduler reports the same requests: counted once, not per rank."""
    m = parse_sglang_metrics(TP2_TEXT)
    assert m == SglangMetrics(running=48, queued=7, token_usage=0.93, retractions_total=17.0,
                              gen_throughput=2210.5, found=True)


def _registry_text(dp_values: dict[int, tuple[float, float, float, float, float]],
                   priority: bool = False) -> str:
    """/metrics as prometheus_client writes it for SGLang's own metric objects: same names,
    documentation and labels (dp_rank added under a data-parallel controller, priority under
    priority scheduling), one scheduler per dp_rank."""
    reg = CollectorRegistry()
    names = [*LABELS, "dp_rank"] + (["priority"] if priority else [])
    running = Gauge("sglang:num_running_reqs", "The number of running requests.", names,
                    registry=reg)
    queued = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
                   names, registry=reg)
    thr = Gauge("sglang:gen_throughput", "The generation throughput (token/s).", names,
                registry=reg)
    usage = Gauge("sglang:token_usage", "The token usage.", names, registry=reg)
    retracted = Counter("sglang:num_retracted_requests_total",
                        "Total number of retracted requests.", names, registry=reg)
    Histogram("sglang:e2e_request_latency_seconds", "Histogram of end-to-end latency.",
              ["model_name"], registry=reg).labels("m").observe(1.5)
    for dp, (r, q, t, u, n) in dp_values.items():
        base = dict(model_name="m", engine_type="unified", tp_rank=str(dp), pp_rank="0",
                    moe_ep_rank="0", dp_rank=str(dp))
        if priority:
            base["priority"] = ""
        running.labels(**base).set(r)
        queued.labels(**base).set(q)
        thr.labels(**base).set(t)
        usage.labels(**base).set(u)
        retracted.labels(**base).inc(n)
        if priority:
            # The per-priority breakdown beside the total (`_log_gauge_queue_count`).
            for prio, share in (("0", q - 1), ("5", 1)):
                queued.labels(**{**base, "priority": prio}).set(share)
                running.labels(**{**base, "priority": prio}).set(r)
    return generate_latest(reg).decode()


def test_data_parallel_schedulers_are_summed() -> None:
    """Each dp_rank is its own scheduler with its own requests: the server's figure is the
    sum, its KV cache usage the fullest rank's."""
    text = _registry_text({0: (30, 2, 1000.0, 0.5, 4), 1: (25, 0, 900.0, 0.8, 1)})
    m = parse_sglang_metrics(text)
    assert (m.running, m.queued, m.gen_throughput, m.retractions_total) == (55, 2, 1900.0, 5.0)
    assert m.token_usage == 0.8


def test_priority_breakdown_is_not_counted_twice() -> None:
    """With priority scheduling the total is under priority="" and the breakdown under
    priority="<n>": only the total counts."""
    text = _registry_text({0: (40, 6, 10.0, 0.2, 0)}, priority=True)
    assert 'priority="5"' in text
    m = parse_sglang_metrics(text)
    assert (m.running, m.queued) == (40, 6)


def test_missing_metrics_are_each_na() -> None:
    """Before the scheduler logs its first stats its gauges have no samples: each missing
    figure is None, the others are read."""
    text = "\n".join(line for line in TP2_TEXT.splitlines()
                     if not line.startswith(("sglang:num_queue_reqs", "sglang:token_usage")))
    m = parse_sglang_metrics(text)
    assert (m.running, m.queued, m.token_usage, m.found) == (48, None, None, True)


def test_only_help_and_type_lines_is_found_but_empty() -> None:
    text = "# HELP sglang:num_running_reqs x\n# TYPE sglang:num_running_reqs gauge\n"
    assert parse_sglang_metrics(text) == SglangMetrics(found=True)


@pytest.mark.parametrize("body", ["", "<html><body>Not Found</body></html>",
                                  '{"detail": "Not Found"}',
                                  "# HELP node_load1 x\nnode_load1 0.5\n"])
def test_a_body_without_sglang_metrics_is_not_found(body: str) -> None:
    assert parse_sglang_metrics(body) == SglangMetrics(found=False)


@pytest.mark.parametrize("line", ['sglang:num_running_reqs{tp_rank="0" 3',
                                  "sglang:num_running_reqs{tp_rank=\"0\"} three",
                                  'sglang:token_usage{tp_rank="0"} 0.5 abc def'])
def test_garbage_in_an_sglang_line_is_a_clear_error(line: str) -> None:
    with pytest.raises(MetricsParseError, match="unreadable SGLang metrics"):
        parse_sglang_metrics(TP2_TEXT + line + "\n")


def test_not_a_number_is_na_not_a_figure() -> None:
    text = f"sglang:gen_throughput{_ranks(0)} NaN\nsglang:num_running_reqs{_ranks(0)} 3\n"
    m = parse_sglang_metrics(text)
    assert m.gen_throughput is None and m.running == 3
    assert not any(isinstance(v, float) and math.isnan(v) for v in vars(m).values())


def test_similar_names_are_not_taken_for_ours() -> None:
    """`sglang:num_running_reqs_offline_batch` and the like must not add into running."""
    text = (f"sglang:num_running_reqs_offline_batch{_ranks(0)} 99\n"
            f"sglang:num_running_reqs{_ranks(0)} 3\n"
            f"sglang:token_usage_extra{_ranks(0)} 1.0\n")
    m = parse_sglang_metrics(text)
    assert m.running == 3 and m.token_usage is None


def test_no_retraction_series_yet_is_zero_where_the_scheduler_reports() -> None:
    """The counter gets its series at the first retraction (`increment_retracted_reqs`):
    with the scheduler's gauges there and no counter, nothing was retracted yet."""
    text = "\n".join(line for line in TP2_TEXT.splitlines()
                     if not line.startswith("sglang:num_retracted_requests_total"))
    assert parse_sglang_metrics(text).retractions_total == 0.0
    only_usage = f"sglang:token_usage{_ranks(0)} 0.4\n"
    assert parse_sglang_metrics(only_usage).retractions_total is None


def test_the_token_counters_decode_per_step_and_generation_per_finished_request() -> None:
    # realtime_tokens_total{mode}: per decode step (metrics_reporter.py report_decode_stats);
    # only mode="decode" is generation. generation_tokens_total: the tokenizer's, one series
    # per is_streaming, bumped when a request finishes (tokenizer_manager.py collect_metrics).
    text = f"""\
# TYPE sglang:realtime_tokens counter
sglang:realtime_tokens_total{_ranks(0, mode="decode")} 5000.0
sglang:realtime_tokens_total{_ranks(1, mode="decode")} 5000.0
sglang:realtime_tokens_total{_ranks(0, mode="prefill_compute")} 90000.0
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{{engine_type="unified",is_streaming="true",model_name="m"}} 300.0
sglang:generation_tokens_total{{engine_type="unified",is_streaming="false",model_name="m"}} 40.0
"""
    m = parse_sglang_metrics(text)
    assert m.decode_tokens_total == 5000.0
    assert m.generation_tokens_total == 340.0


def test_no_token_counter_is_none() -> None:
    m = parse_sglang_metrics(f"sglang:num_running_reqs{_ranks(0)} 3.0\n")
    assert m.decode_tokens_total is None and m.generation_tokens_total is None


def test_a_launch_line_asks_for_metrics_only_with_the_flag_itself() -> None:
    sglang = ["python", "-m", "sglang.launch_server", "--model-path", "m"]
    assert metrics_enabled([*sglang, "--enable-metrics"])
    assert not metrics_enabled(sglang)
    # A longer flag that starts with the same words is another flag: nothing is served.
    assert not metrics_enabled([*sglang, "--enable-metrics-for-all-schedulers"])
