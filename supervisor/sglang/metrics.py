"""Reading SGLang's own Prometheus `/metrics` (served when it runs with `--enable-metrics`,
mounted by `sglang/srt/utils/common.py:2849` add_prometheus_middleware):
how many requests it is running and queueing, how full its KV cache is, how many requests it
has retracted, and its live generation throughput.

What SGLang 0.5.23 exports, and how (sglang/srt/observability/metrics_collector.py,
`SchedulerMetricsCollector`):
- gauges `sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:token_usage` (0..1),
  `sglang:gen_throughput` (token/s), and the counter `sglang:num_retracted_requests_total`;
- labels `model_name, engine_type, tp_rank, pp_rank, moe_ep_rank`, plus `dp_rank` under a
  data-parallel controller (every scheduler of data or attention parallelism has its own)
  and `priority` with priority scheduling;
- the counter `sglang:realtime_tokens_total{mode="decode"}`, bumped by every decode step
  (`sglang/srt/managers/scheduler_components/metrics_reporter.py` report_decode_stats ->
  `increment_realtime_tokens`, metrics_collector.py:1033): the one figure that moves while
  answers are still being written. The tokenizer's `sglang:generation_tokens_total`
  (labels `model_name, engine_type, is_streaming`) moves only when a request *finishes*
  (`sglang/srt/managers/tokenizer_manager.py` collect_metrics, `if state.finished:` ->
  observe_one_finished_request): it is read as a completion signal, not a token one;
- by default only the first rank of each attention group reports (`is_stats_logging_rank`),
  but with `--enable-metrics-for-all-schedulers` every tensor-parallel rank reports the same
  batch; pipeline stages each report the same requests;
- with priority scheduling the queue gauges carry the total under `priority=""` and a
  per-priority breakdown under `priority="<n>"` (`_log_gauge_queue_count`).

So the server's figure is: per `dp_rank` (one scheduler's requests) the largest value any of
its ranks reports, summed over `dp_rank`s; token usage is the fullest pool's (the one that
will retract first); per-priority series are skipped (their total is already there).

A gauge has no sample until the scheduler first logs its stats, so any figure may be
missing: each is None ("n/a") on its own, and a failed or unreadable scrape is all n/a with
the reason, never an error. Spoken with httpx, the client of the daemon's few requests to
SGLang (abort.py says why).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import anyio
import httpx
from prometheus_client.parser import text_string_to_metric_families

METRICS_PATH = "/metrics"
# The launch flag that serves it: off unless given (`sglang/srt/arg_groups/fields/
# observability.py:70` enable_metrics = False).
ENABLE_METRICS = "enable-metrics"

RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"
TOKEN_USAGE = "sglang:token_usage"
GEN_THROUGHPUT = "sglang:gen_throughput"
# The counter's family is `sglang:num_retracted_requests`; its sample carries `_total`.
RETRACTED_TOTAL = "sglang:num_retracted_requests_total"
# Per decode step (mode="decode"; the other modes count prefill): tokens while they are made.
REALTIME_TOKENS = "sglang:realtime_tokens_total"
# Per finished request, summed over `is_streaming`: moves only when answers end.
GENERATION_TOKENS = "sglang:generation_tokens_total"

_SUMMED = (RUNNING, QUEUED, GEN_THROUGHPUT, RETRACTED_TOTAL)
_WANTED = frozenset((*_SUMMED, TOKEN_USAGE, REALTIME_TOKENS, GENERATION_TOKENS))


def metrics_enabled(argv: Sequence[str]) -> bool:
    """Whether a server's launch line asks SGLang for its /metrics."""
    return f"--{ENABLE_METRICS}" in argv


@dataclass(frozen=True)
class SglangMetrics:
    """One scrape of one server, summed over its ranks; None where SGLang gave no figure."""

    running: int | None = None
    queued: int | None = None
    token_usage: float | None = None        # 0..1, of the KV cache
    retractions_total: float | None = None  # since the server started
    gen_throughput: float | None = None     # token/s, SGLang's own live figure
    decode_tokens_total: float | None = None    # realtime_tokens_total{mode="decode"}
    generation_tokens_total: float | None = None  # tokens of finished requests
    # Whether the body had any SGLang metric at all: a server answering /metrics with
    # something else (or nothing yet) is not a server we poll.
    found: bool = False


@dataclass(frozen=True)
class Scrape:
    """A scrape's outcome: the figures, or why there are none (n/a)."""

    metrics: SglangMetrics | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.metrics is not None


class MetricsParseError(ValueError):
    """The body is not Prometheus text where it names SGLang's metrics."""


def _wanted_lines(text: str) -> Iterable[str]:
    """Only the sample lines of the metrics we read. SGLang's /metrics also carries
    dozens of histograms (hundreds of bucket lines): skipping them before parsing keeps a
    scrape cheap however many metrics a release adds."""
    for line in text.splitlines():
        if not line.startswith("sglang:"):
            continue
        end = len(line)
        for sep in ("{", " ", "\t"):
            i = line.find(sep)
            if i != -1:
                end = min(end, i)
        if line[:end] in _WANTED:
            yield line


def parse_sglang_metrics(text: str) -> SglangMetrics:
    """The figures in one /metrics body. Raises MetricsParseError naming the bad line's
    problem when an SGLang sample line cannot be read."""
    lines = list(_wanted_lines(text))
    found = any(line.startswith("sglang:") or line.startswith("# TYPE sglang:")
                for line in text.splitlines())
    # per metric: dp_rank ("" without one) -> the largest value its ranks report
    per_group: dict[str, dict[str, float]] = {name: {} for name in _WANTED}
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            for sample in family.samples:
                if sample.name not in _WANTED:
                    continue
                if sample.labels.get("priority", ""):
                    continue
                if sample.name == REALTIME_TOKENS and sample.labels.get("mode") != "decode":
                    continue
                value = float(sample.value)
                if not math.isfinite(value):
                    continue
                groups = per_group[sample.name]
                dp = sample.labels.get("dp_rank", "")
                if sample.name == GENERATION_TOKENS:
                    # The tokenizer's counter: one series per is_streaming value, no ranks.
                    dp = f"{dp}/{sample.labels.get('is_streaming', '')}"
                    groups[dp] = groups.get(dp, 0.0) + value
                    continue
                groups[dp] = max(groups.get(dp, value), value)
    except ValueError as exc:
        raise MetricsParseError(f"unreadable SGLang metrics: {exc}") from None

    def summed(name: str) -> float | None:
        groups = per_group[name]
        return sum(groups.values()) if groups else None

    def as_int(value: float | None) -> int | None:
        return None if value is None else int(round(value))

    usage = per_group[TOKEN_USAGE]
    running = summed(RUNNING)
    retracted = summed(RETRACTED_TOTAL)
    if retracted is None and running is not None:
        # The counter's series is created by its first increment (`increment_retracted_reqs`
        # is the only place it takes labels): a scheduler that reports and has no series has
        # retracted nothing yet. Zero, not n/a, so the first retractions count in the rate.
        retracted = 0.0
    return SglangMetrics(
        running=as_int(running), queued=as_int(summed(QUEUED)),
        token_usage=max(usage.values()) if usage else None,
        retractions_total=retracted, gen_throughput=summed(GEN_THROUGHPUT),
        decode_tokens_total=summed(REALTIME_TOKENS),
        generation_tokens_total=summed(GENERATION_TOKENS), found=found)


async def scrape(client: httpx.AsyncClient, base_url: str, timeout_s: float) -> Scrape:
    """GET base_url/metrics and read it; never raises for network trouble or a bad body."""
    try:
        resp = await client.get(base_url + METRICS_PATH, timeout=timeout_s)
    except httpx.TimeoutException:
        return Scrape(None, f"/metrics: no answer within {timeout_s:g} s")
    except httpx.HTTPError as exc:
        return Scrape(None, f"/metrics: {type(exc).__name__}: {exc}" if str(exc)
                      else f"/metrics: {type(exc).__name__}")
    except AttributeError as exc:
        # A server that dies while the connection opens: httpcore on anyio asks the closed
        # socket (None by then) for its peer name and raises this, not a ConnectError
        # (seen in the crash drill). The server is gone, as with a refused connection.
        return Scrape(None, f"/metrics: the connection closed as it opened ({exc})")
    if resp.status_code != 200:
        return Scrape(None, f"/metrics: HTTP {resp.status_code}")
    try:
        # Off the loop: a body is tens of kilobytes, and eight servers are read together.
        metrics = await anyio.to_thread.run_sync(parse_sglang_metrics, resp.text)
    except MetricsParseError as exc:
        return Scrape(None, f"/metrics: {exc}")
    if not metrics.found:
        return Scrape(None, "/metrics: no SGLang metrics in the answer")
    return Scrape(metrics)
