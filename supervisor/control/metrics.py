"""`GET /metrics`: the snapshot's figures in Prometheus' text format, for the node's
monitoring. prometheus-client writes the exposition format (escaping, HELP/TYPE lines,
counter `_total` naming) so we do not hand-format it.

Counters count since this daemon started (Prometheus treats a restart as a counter reset),
except prompts by outcome and the waste ledger's tokens, which are the job's totals from the
state DB.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from supervisor.contract import status as c
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.tuning import TuneState, Tuning
from supervisor.control.series_labels import Labelled, series_labels

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class RestartCauses:
    """Server restarts by server and cause, counted from the events as the hub sees them."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def observe(self, e: c.Event) -> None:
        if e.kind != EventKind.SERVER_STATE:
            return
        d = e.detail()
        to = d.get("to")
        if to in ("BACKOFF", "FAILED"):
            self.counts[(e.subject, str(d.get("exit_kind") or "unknown"))] += 1
        elif to == "DRAINING" and e.actor not in ("supervisor", ""):
            self.counts[(e.subject, "operator")] += 1


class _StatusCollector(Collector):
    def __init__(self, s: c.Status, totals: tuple[int, int], causes: RestartCauses,
                 requests: dict[str, tuple[int, int]]) -> None:
        self.s, self.totals, self.causes, self.requests = s, totals, causes, requests

    def collect(self) -> Iterator[Metric]:
        s = self.s
        prompts = CounterMetricFamily("dflash_prompts", "Prompts finished, by outcome",
                                      labels=["outcome"])
        prompts.add_metric(["done"], s.job.done)
        prompts.add_metric(["failed"], s.job.failed)
        yield prompts
        state = GaugeMetricFamily("dflash_prompts_state", "Prompts by state now",
                                  labels=["state"])
        for name, n in (("pending", s.job.pending), ("in_flight", s.job.in_flight),
                        ("done", s.job.done), ("failed", s.job.failed)):
            state.add_metric([name], n)
        yield state
        completions, tokens = self.totals
        yield CounterMetricFamily("dflash_completions", "Completions received by this daemon",
                                  value=completions)
        yield CounterMetricFamily("dflash_output_tokens", "Output tokens received by this daemon",
                                  value=tokens)
        requests = CounterMetricFamily("dflash_requests", "Requests answered, by server and "
                                       "result", labels=["server", "result"])
        for server, (done, errors) in sorted(self.requests.items()):
            requests.add_metric([server, "completed"], done - errors)
            requests.add_metric([server, "error"], errors)
        yield requests
        restarts = CounterMetricFamily("dflash_server_restarts", "Server stops that led to a "
                                       "restart, by server and cause", labels=["server", "cause"])
        for (server, cause), n in sorted(self.causes.counts.items()):
            restarts.add_metric([server, cause], n)
        yield restarts
        yield from self._gauges(s)

    def _breaker(self, b: c.Breaker | None) -> Iterator[Metric]:
        if b is None:
            return
        yield GaugeMetricFamily("dflash_breaker_open", "1 while the circuit breaker has "
                                "paused dispatch on request errors", value=1 if b.tripped else 0)
        yield GaugeMetricFamily("dflash_breaker_error_ratio", "Share of the recent requests' "
                                "answers that were errors", value=b.error_rate)
        errors = GaugeMetricFamily("dflash_breaker_window_errors", "Errors among the recent "
                                   "requests, by kind", labels=["kind"])
        for e in b.errors:
            errors.add_metric([e.kind], e.count)
        yield errors

    @staticmethod
    def _waste(w: c.Waste | None) -> Iterator[Metric]:
        if w is None:
            return
        wasted = CounterMetricFamily("dflash_wasted_tokens", "Generated tokens thrown away "
                                     "over the whole job, by cause", labels=["cause"])
        for cause in w.causes:
            wasted.add_metric([cause.cause], cause.tokens)
        yield wasted
        yield CounterMetricFamily("dflash_kept_tokens", "Generated tokens kept in the output "
                                  "over the whole job", value=w.kept_tokens)
        if w.goodput is not None:
            yield GaugeMetricFamily("dflash_goodput_ratio", "Kept share of all generated "
                                    "tokens (kept / (kept + wasted))", value=w.goodput)
        yield CounterMetricFamily("dflash_continued_tokens", "Tokens continuing truncated "
                                  "answers from their stored tokens did not decode again, "
                                  "over the whole job", value=w.continued_tokens)
        yield CounterMetricFamily("dflash_continued_answers", "Truncated answers continued "
                                  "from their stored tokens, over the whole job",
                                  value=w.continued_answers)

    @staticmethod
    def _continuation(cont: c.Continuation | None) -> Iterator[Metric]:
        if cont is None:
            return
        for name, doc, value in (
                ("dflash_continuable_answers", ("Truncated answers a raise of max tokens "
                                                "would continue from their stored tokens"),
                 cont.continuable),
                ("dflash_continuable_tokens", ("Output tokens those answers hold (not decoded "
                                               "again when they are continued)"),
                 cont.tokens_kept),
                ("dflash_truncated_without_ids", ("Truncated answers with no stored tokens (a "
                                                  "raise re-runs them from the start)"),
                 cont.without_ids),
                ("dflash_continuations_pending", "Continuations waiting or in flight",
                 cont.pending)):
            yield GaugeMetricFamily(name, doc, value=value)

    @staticmethod
    def _stream_watch(q: c.Quality) -> Iterator[Metric]:
        # Counters since the daemon started (a restart starts them again, as Prometheus
        # expects of a counter): what watching streamed requests caught while they ran.
        for name, doc, value in (
                ("dflash_loops_aborted", "Looping requests aborted while they ran",
                 q.loops_aborted_total),
                ("dflash_loop_tokens_saved", "Tokens not generated because a loop was aborted "
                 "early (max tokens minus tokens generated)", q.loop_tokens_saved),
                ("dflash_requests_stalled", "Requests aborted for producing no token for "
                 "dispatch.stall_s", q.stalled_total)):
            if value is not None:
                yield CounterMetricFamily(name, doc, value=value)

    def _gauges(self, s: c.Status) -> Iterator[Metric]:
        def gauge(name: str, doc: str, value: float | None) -> Iterator[Metric]:
            if value is not None:
                yield GaugeMetricFamily(name, doc, value=value)

        yield from gauge("dflash_daemon_start_time_seconds", "When this daemon started "
                         "(Unix time)", s.started_at)
        yield from gauge("dflash_max_tokens", "Live max tokens", s.max_tokens)
        yield from gauge("dflash_requests_per_second", "Windowed completions per second",
                         s.rates.req_per_s)
        yield from gauge("dflash_output_tokens_per_second", "Windowed output tokens per second",
                         s.rates.tok_per_s)
        yield from gauge("dflash_truncation_ratio", "Truncated share of recent completions",
                         s.quality.truncation_rate)
        yield from gauge("dflash_bad_output_ratio", "Bad share of recent completions",
                         s.quality.bad_rate)
        yield from gauge("dflash_eta_seconds", "Estimated seconds to finish", s.eta.seconds)
        yield from gauge("dflash_eta_low_seconds", "Low end of the ETA's interval", s.eta.low_s)
        yield from gauge("dflash_eta_high_seconds", "High end of the ETA's interval",
                         s.eta.high_s)
        yield from gauge("dflash_eta_warming_up", "1 while the ETA is still warming up",
                         1 if s.eta.warming_up else 0)
        yield from gauge("dflash_truncation_loop_ratio", "Share of recent completions "
                         "truncated while looping (degenerate repetition)", s.quality.loop_rate)
        yield from gauge("dflash_truncation_long_ratio", "Share of recent completions "
                         "truncated without looping", s.quality.long_rate)
        yield from gauge("dflash_truncation_thinking_ratio", "Share of recent completions cut "
                         "off inside the thinking (empty content)",
                         s.quality.thinking_truncated_rate)
        yield from gauge("dflash_truncation_answer_ratio", "Share of recent completions cut "
                         "off in the answer", s.quality.answer_truncated_rate)
        yield from self._breaker(s.breaker)
        yield from self._waste(s.waste)
        yield from self._continuation(s.continuation)
        yield from self._tuning(s.tuning)
        yield from self._stream_watch(s.quality)
        if s.energy is not None:
            # Joules, not kWh: Prometheus wants base units (a panel shows them as kWh).
            yield from gauge("dflash_energy_used_joules", "Energy the job's GPUs used so far",
                             _joules(s.energy.kwh_so_far))
            yield from gauge("dflash_energy_projected_joules", "Energy the whole job is "
                             "projected to use", _joules(s.energy.kwh_projected))
            yield from gauge("dflash_energy_joules_per_token", "GPU joules per output token "
                             "over the metrics window", s.energy.joules_per_token)
        per_joule = GaugeMetricFamily("dflash_server_tokens_per_joule", "Output tokens per "
                                      "joule over the metrics window", labels=["server"])
        for srv in s.servers:
            if srv.tokens_per_joule is not None:
                per_joule.add_metric([srv.name], srv.tokens_per_joule)
        yield per_joule
        paused = GaugeMetricFamily("dflash_paused", "1 while dispatch is paused for this "
                                   "reason", labels=["source"])
        for p in s.paused:
            paused.add_metric([p.source], 1)
        yield paused
        in_flight = GaugeMetricFamily("dflash_in_flight", "Requests in flight", labels=["server"])
        by_state: Counter[str] = Counter(srv.state.value for srv in s.servers)
        for srv in s.servers:
            in_flight.add_metric([srv.name], srv.in_flight)
        yield in_flight
        waiting = GaugeMetricFamily("dflash_server_waiting_requests", "Streamed requests "
                                    "silent while the server streams for others (queued or "
                                    "retracted by SGLang: waiting, not stalled)",
                                    labels=["server"])
        for srv in s.servers:
            waiting.add_metric([srv.name], srv.waiting)
        yield waiting
        yield from self._sglang(s)
        states = GaugeMetricFamily("dflash_servers", "Servers by state", labels=["state"])
        for st in c.ServerState:
            states.add_metric([st.value], by_state.get(st.value, 0))
        yield states
        yield self._server_state(s)
        gpu_figures = (("dflash_gpu_power_watts", "GPU power draw", "power_w"),
                       ("dflash_gpu_power_limit_watts", "GPU power limit", "power_limit_w"),
                       ("dflash_gpu_utilization_ratio", "GPU utilisation (0..1)",
                        "utilization_pct"),
                       ("dflash_gpu_memory_used_bytes", "GPU memory used", "memory_used_bytes"),
                       ("dflash_gpu_temperature_celsius", "GPU temperature", "temperature_c"))
        for name, doc, attr in gpu_figures:
            family = GaugeMetricFamily(name, doc, labels=["gpu", "server"])
            for g in s.gpus.gpus:
                value = getattr(g, attr)
                if value is not None:
                    scale = 0.01 if attr == "utilization_pct" else 1
                    family.add_metric([str(g.index), g.server or ""], value * scale)
            yield family
        energy = CounterMetricFamily("dflash_gpu_energy_joules", "The driver's total-energy "
                                     "counter (since it loaded)", labels=["gpu", "server"])
        for g in s.gpus.gpus:
            if g.energy_j is not None:
                energy.add_metric([str(g.index), g.server or ""], g.energy_j)
        yield energy
        if s.uploads is not None:
            yield from gauge("dflash_upload_backlog_shards", "Shards waiting to be uploaded",
                             s.uploads.backlog_shards)
            yield from gauge("dflash_upload_backlog_bytes", "Bytes waiting to be uploaded",
                             s.uploads.backlog_bytes)
            yield from gauge("dflash_upload_consecutive_failures", "Upload failures in a row",
                             s.uploads.consecutive_failures)
            yield from gauge("dflash_uploads_stopped", "1 when uploads stopped",
                             1 if s.uploads.stopped else 0)


    @staticmethod
    def _tuning(t: Tuning | None) -> Iterator[Metric]:
        """The flag search (absent on a daemon without the tuner): its state as a state set
        with the canary named, the best flags' gain, and how far it got. The trials
        themselves are rows of the state DB's tune_trials, not series."""
        if t is None:
            return
        state = GaugeMetricFamily("dflash_tune_state", "1 for the state the flag search is "
                                  "in, 0 for the others", labels=["state", "canary"])
        for st in TuneState:
            state.add_metric([st.value, t.canary or ""], 1 if t.state == st else 0)
        yield state
        if t.gain is not None:
            yield GaugeMetricFamily("dflash_tune_gain_ratio", "The best flags' gain in output "
                                    "tokens per GPU-second over the flags the job started "
                                    "with (0.4 = +40%)", value=t.gain)
        yield GaugeMetricFamily("dflash_tune_trials_done", "Candidate flag sets tried so far",
                                value=t.trials_done)
        yield GaugeMetricFamily("dflash_tune_trials_left", "Candidates left in the search",
                                value=t.trials_left)

    @staticmethod
    def _server_state(s: c.Status) -> Metric:
        # Every state of every server, 1 for the one it is in (a state set, as Prometheus'
        # docs want an enum): `== 1` picks the state, and an alert matches one server.
        family = GaugeMetricFamily("dflash_server_state", "1 for the state each server is in, "
                                   "0 for the others", labels=["server", "state"])
        for srv in s.servers:
            for st in c.ServerState:
                family.add_metric([srv.name, st.value], 1 if srv.state == st else 0)
        return family

    @staticmethod
    def _sglang(s: c.Status) -> Iterator[Metric]:
        """Per server, SGLang's own figures (read from its /metrics with --enable-metrics;
        a server without a figure has no sample) and the over-commit flag."""
        figures = (
            ("dflash_server_sglang_running_requests", "Requests SGLang is running",
             "sglang_running"),
            ("dflash_server_sglang_queued_requests", "Requests waiting in SGLang's queue",
             "sglang_queued"),
            ("dflash_server_kv_cache_usage_ratio", "SGLang's KV cache usage (0..1)",
             "token_usage"),
            ("dflash_server_sglang_retractions_per_second", "Requests SGLang retracted per "
             "second over the last poll", "retractions_per_s"),
            ("dflash_server_sglang_generation_tokens_per_second", "SGLang's live generation "
             "throughput", "gen_throughput"),
        )
        for name, doc, attr in figures:
            family = GaugeMetricFamily(name, doc, labels=["server"])
            for srv in s.servers:
                value = getattr(srv, attr)
                if value is not None:
                    family.add_metric([srv.name], value)
            yield family
        retractions = CounterMetricFamily("dflash_server_sglang_retractions", "Requests SGLang "
                                          "retracted since the server started (KV cache full)",
                                          labels=["server"])
        for srv in s.servers:
            if srv.retractions is not None:
                retractions.add_metric([srv.name], srv.retractions)
        yield retractions
        over = GaugeMetricFamily("dflash_server_overcommitted", "1 while SGLang queues or "
                                 "retracts what we send to this server", labels=["server"])
        for srv in s.servers:
            over.add_metric([srv.name], 1 if srv.overcommitted else 0)
        yield over
        limit = GaugeMetricFamily("dflash_server_inflight_limit", "The in-flight limit in "
                                  "force (the saturation guard lowers it below the max)",
                                  labels=["server"])
        most = GaugeMetricFamily("dflash_server_inflight_max", "The in-flight limit the "
                                 "server was started with (its max running requests)",
                                 labels=["server"])
        for srv in s.servers:
            most.add_metric([srv.name], srv.max_running)
            if srv.inflight_limit is not None:
                limit.add_metric([srv.name], srv.inflight_limit)
        yield limit
        yield most


def _joules(kwh: float | None) -> float | None:
    return None if kwh is None else kwh * 3.6e6


def render(s: c.Status, totals: tuple[int, int], causes: RestartCauses,
           requests: dict[str, tuple[int, int]]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Labelled(_StatusCollector(s, totals, causes, requests),
                               series_labels(s.job_name, s.partition)))
    return generate_latest(registry)
