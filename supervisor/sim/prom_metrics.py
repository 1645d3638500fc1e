"""`/metrics` as SGLang 0.5.23 serves it with `--enable-metrics`.

SGLang runs prometheus_client in multiprocess mode (`sglang/srt/utils/common.py`
set_prometheus_multiproc_dir / add_prometheus_middleware): a temporary PROMETHEUS_MULTIPROC_DIR
set before prometheus_client is imported, and a `MultiProcessCollector` registry mounted at
`/metrics` (no redirect to `/metrics/`). The simulator does the same, so the exposition text is
byte-for-byte the library's: counters without `_created`, gauges of the default
multiprocess mode ("all", e.g. `sglang:num_retracted_reqs`) carrying a `pid` label, the
"mostrecent" ones not.

Names, help texts, types and labels are those of
`sglang/srt/observability/metrics_collector.py`:
- scheduler gauges/counters carry {model_name, engine_type, tp_rank, pp_rank, moe_ep_rank}
  (+ dp_rank when data parallelism gives the scheduler one);
- tokenizer counters carry {model_name, engine_type, is_streaming}.
The scheduler sets its gauges on its logging ticks; the simulator sets them just before each
scrape, which is the same values, fresher.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Held for the process lifetime: the directory is removed when this object is collected,
# exactly like SGLang's module-level TemporaryDirectory.
_multiproc_dir: tempfile.TemporaryDirectory[str] | None = None


def set_prometheus_multiproc_dir() -> None:
    """Before prometheus_client is imported (it picks its value class at import time)."""
    global _multiproc_dir
    parent = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    _multiproc_dir = tempfile.TemporaryDirectory(dir=parent)  # inside the user's dir if set
    if parent is None:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = _multiproc_dir.name


@dataclass(frozen=True)
class SchedulerSample:
    """What the scheduler would log on one stats tick."""
    num_running_reqs: int
    num_queue_reqs: int
    gen_throughput: float
    token_usage: float
    num_used_tokens: int
    max_total_num_tokens: int
    num_retracted_reqs: int
    cache_hit_rate: float = 0.0
    decode_tokens_total: float = 0.0     # tokens decoded since start (realtime_tokens_total)


def scheduler_labels(model_name: str, dp_size: int) -> dict[str, str]:
    """The scheduler collector's labels for rank 0 (the stats-logging rank). engine_type is
    "unified" without PD disaggregation (`sglang/srt/disaggregation/utils.py` to_engine_type)."""
    labels = {"model_name": model_name, "engine_type": "unified",
              "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    if dp_size > 1:
        labels["dp_rank"] = "0"          # set only when the scheduler has a dp_rank
    return labels


class SimMetrics:
    """The subset of SGLang's collectors the simulator can give meaningful values."""

    def __init__(self, model_name: str, dp_size: int) -> None:
        # Imported here, after set_prometheus_multiproc_dir(), as SGLang does.
        from prometheus_client import Counter, Gauge

        self.labels = scheduler_labels(model_name, dp_size)
        names = list(self.labels)

        def gauge(name: str, doc: str, mode: str | None = "mostrecent") -> Any:
            if mode is None:             # SGLang leaves some on the default ("all": pid label)
                return Gauge(name=name, documentation=doc, labelnames=names)
            return Gauge(name=name, documentation=doc, labelnames=names,
                         multiprocess_mode=mode)

        self.num_running_reqs = gauge("sglang:num_running_reqs",
                                      "The number of running requests.")
        self.num_queue_reqs = gauge("sglang:num_queue_reqs",
                                    "The number of requests in the waiting queue.")
        self.gen_throughput = gauge("sglang:gen_throughput",
                                    "The generation throughput (token/s).")
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.full_token_usage = gauge("sglang:full_token_usage",
                                      "The token usage for full attention layers.")
        self.num_used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.max_total_num_tokens = gauge(
            "sglang:max_total_num_tokens",
            "Maximum total number of tokens in the KV cache pool.")
        self.num_retracted_reqs = gauge("sglang:num_retracted_reqs",
                                        "The number of retracted requests.", mode=None)
        # "requests", not "reqs": SGLang's own workaround for a duplicate-name clash.
        self.num_retracted_requests_total = Counter(
            name="sglang:num_retracted_requests_total",
            documentation="Total number of retracted requests.", labelnames=names)
        self.num_retracted_input_tokens_total = Counter(
            name="sglang:num_retracted_input_tokens_total",
            documentation="Total number of retracted input tokens.", labelnames=names)
        self.num_retracted_output_tokens_total = Counter(
            name="sglang:num_retracted_output_tokens_total",
            documentation="Total number of retracted output tokens.", labelnames=names)

        # Bumped every decode step by the tokens it made (`metrics_reporter.py`
        # report_decode_stats -> increment_realtime_tokens): the counter that moves while
        # answers are being written; the tokenizer's generation_tokens_total moves only
        # when one finishes.
        self.realtime_tokens_total = Counter(
            name="sglang:realtime_tokens_total",
            documentation="Total number of tokens processed (updated on each log interval). "
                          "mode: prefill_compute, prefill_cache, decode.",
            labelnames=names + ["mode"])
        self._decode_counted = 0

        # The tokenizer manager's collector: no rank labels, plus is_streaming.
        self.tokenizer_labels = {"model_name": model_name, "engine_type": "unified"}
        tok_names = list(self.tokenizer_labels) + ["is_streaming"]
        self.prompt_tokens_total = Counter(
            name="sglang:prompt_tokens_total",
            documentation="Number of prefill tokens processed.", labelnames=tok_names)
        self.generation_tokens_total = Counter(
            name="sglang:generation_tokens_total",
            documentation="Number of generation tokens processed.", labelnames=tok_names)
        self.num_requests_total = Counter(
            name="sglang:num_requests_total",
            documentation="Number of requests processed.", labelnames=tok_names)
        # metrics_collector.py:1959, labelled with the collector's own labels (no
        # is_streaming); no sample, so no family on /metrics, before the first abort.
        self.num_aborted_requests_total = Counter(
            name="sglang:num_aborted_requests_total",
            documentation="Number of requests aborted.",
            labelnames=list(self.tokenizer_labels))

    def emit_constants(self, max_total_num_tokens: int) -> None:
        """Once at startup, as the scheduler's emit_metrics_constants."""
        self.max_total_num_tokens.labels(**self.labels).set(max_total_num_tokens)

    def log_stats(self, s: SchedulerSample) -> None:
        lab = self.labels
        self.num_running_reqs.labels(**lab).set(s.num_running_reqs)
        self.num_queue_reqs.labels(**lab).set(s.num_queue_reqs)
        self.gen_throughput.labels(**lab).set(s.gen_throughput)
        self.cache_hit_rate.labels(**lab).set(s.cache_hit_rate)
        self.token_usage.labels(**lab).set(s.token_usage)
        self.full_token_usage.labels(**lab).set(s.token_usage)
        self.num_used_tokens.labels(**lab).set(s.num_used_tokens)
        self.num_retracted_reqs.labels(**lab).set(s.num_retracted_reqs)
        decoded = int(s.decode_tokens_total)
        if decoded > self._decode_counted:
            self.realtime_tokens_total.labels(**lab, mode="decode").inc(
                decoded - self._decode_counted)
            self._decode_counted = decoded

    def retracted(self, reqs: int, input_tokens: int, output_tokens: int) -> None:
        lab = self.labels
        self.num_retracted_requests_total.labels(**lab).inc(reqs)
        self.num_retracted_input_tokens_total.labels(**lab).inc(input_tokens)
        self.num_retracted_output_tokens_total.labels(**lab).inc(output_tokens)

    def aborted(self) -> None:
        self.num_aborted_requests_total.labels(**self.tokenizer_labels).inc(1)

    def finished_request(self, prompt_tokens: int, generation_tokens: int,
                         is_streaming: bool = False) -> None:
        lab = {**self.tokenizer_labels, "is_streaming": "true" if is_streaming else "false"}
        self.prompt_tokens_total.labels(**lab).inc(prompt_tokens)
        self.generation_tokens_total.labels(**lab).inc(generation_tokens)
        self.num_requests_total.labels(**lab).inc(1)


def metrics_asgi_app(before_scrape: Callable[[], None]) -> Any:
    """prometheus_client's ASGI app over a MultiProcessCollector registry, as SGLang mounts
    it; `before_scrape` refreshes the gauges first."""
    from prometheus_client import CollectorRegistry, make_asgi_app, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    inner = make_asgi_app(registry=registry)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            before_scrape()
        await inner(scope, receive, send)
    return app
