"""The contract's Status from the job's own: the dispatcher's windows, the fleet's servers,
the GPU sampler, the uploader and one cheap store query (the counts). The daemon's side of the
contract: clients read the records, only the job builds them."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from state.continuation_reads import ContinuationTotals
from state.token_ids_table import Continuable
from state.waste_table import TokenLedger
from supervisor.config import JobConfig
from supervisor.contract import status as c
from supervisor.contract.status import flag_value
from supervisor.contract.tuning import Tuning
from supervisor.control.series_labels import job_name
from supervisor.dispatch.error_breaker import BreakerSnapshot
from supervisor.gpu.energy import POWER, UNAVAILABLE, EnergySnapshot
from supervisor.gpu.snapshot import GpuTelemetry
from supervisor.job.status import JobStatus
from supervisor.servers.server_state import ServerSnapshot
from supervisor.servers.sglang_view import SglangView
from supervisor.uploads.upload_status import UploadStatus


class FlagSource(Protocol):
    def flags(self, name: str) -> dict[str, Any]: ...


def flags_of(flags: Mapping[str, Any]) -> tuple[c.Flag, ...]:
    return tuple(c.Flag(k, flag_value(v)) for k, v in flags.items())


def _server(s: ServerSnapshot, now: float, rates: Mapping[str, Any],
            flags: FlagSource | None, energy: EnergySnapshot | None = None) -> c.ServerStatus:
    r = rates.get(s.name)
    # A draining server still answers what it holds: its uptime runs on until it stops.
    serving = s.state in (c.ServerState.READY, c.ServerState.DRAINING)
    ready_since = s.ready_since if s.ready_since is not None else s.state_since
    try:
        server_flags = flags_of(flags.flags(s.name)) if flags is not None else ()
    except KeyError:
        server_flags = ()
    return c.ServerStatus(
        name=s.name, gpus=tuple(s.gpus), port=s.port, state=c.ServerState(s.state),
        state_reason=s.state_reason, state_since=s.state_since, pid=s.pid,
        uptime_s=max(0.0, now - ready_since) if serving else None, in_flight=s.in_flight,
        max_running=s.max_running, req_per_s=r.req_per_s if r else 0.0,
        tok_per_s=r.tok_per_s if r else 0.0, restarts=s.restarts,
        failures_in_window=s.failures_in_window, last_exit_reason=s.last_exit_reason,
        flags=server_flags, argv=tuple(s.argv),
        tokens_per_joule=next((e.tokens_per_joule for e in (energy.servers if energy else ())
                               if e.server == s.name), None),
        **_sglang(s.sglang, now), inflight_limit=s.inflight_limit,
        inflight_limit_reason=s.inflight_limit_reason, waiting=s.waiting,
        unserved_in_row=s.unserved_in_row, attached_url=s.attached_url)


def _sglang(v: SglangView, now: float) -> dict[str, Any]:
    """The contract's sglang_* fields from the server's view of its own /metrics, with the
    sample's age at `now` (the snapshot's time, on the clock that stamped the scrape)."""
    return dict(
        sglang_age_s=None if v.scraped_at is None else max(0.0, now - v.scraped_at),
        sglang_interval_s=v.interval_s,
        sglang_metrics=v.polled, sglang_running=v.running, sglang_queued=v.queued,
        token_usage=v.token_usage,
        retractions=None if v.retractions_total is None else int(v.retractions_total),
        retractions_per_s=None if v.retractions_per_min is None else v.retractions_per_min / 60,
        gen_throughput=v.gen_throughput, sglang_error=v.error,
        overcommitted=v.overcommitted, overcommit_reason=v.overcommit_reason)


def _gpus(t: GpuTelemetry | None, servers: Iterable[ServerSnapshot]) -> c.Gpus:
    if t is None:
        return c.Gpus(available=False, reason="not sampled yet", sampled_at=None)
    owner = {g: s.name for s in servers for g in s.gpus}
    return c.Gpus(
        available=t.available, reason=t.reason, sampled_at=t.sampled_at,
        driver_version=t.driver_version,
        gpus=tuple(c.GpuStatus(
            index=g.index, name=g.name, server=owner.get(g.index), power_w=g.power_w,
            power_limit_w=g.power_limit_w, utilization_pct=g.utilization_pct,
            memory_used_bytes=g.memory_used_bytes, memory_total_bytes=g.memory_total_bytes,
            temperature_c=g.temperature_c, errors=tuple(g.errors), energy_j=g.energy_j)
            for g in t.gpus))


def _eta(js: JobStatus) -> c.Eta:
    e = js.length_eta
    windowed = js.windowed_eta_s
    if js.eta_held:
        return c.Eta(seconds=None, warming_up=False, held=js.eta_held, windowed_s=None)
    if e is None or e.eta_s is None or not js.remaining:
        return c.Eta(seconds=js.eta_s, warming_up=js.eta_warming_up,
                     reason=e.reason if e is not None and js.remaining else None,
                     windowed_s=windowed)
    return c.Eta(seconds=e.eta_s, warming_up=e.warming_up,
                 basis="output tokens (Kaplan-Meier lengths)", low_s=e.low_s, high_s=e.high_s,
                 interval=0.8, reason=e.reason, windowed_s=windowed)


def _energy(e: EnergySnapshot | None) -> c.Energy | None:
    if e is None:
        return None
    if not e.available:
        return c.Energy(source=f"unavailable: {e.reason}")
    sources = sorted({g.source for g in e.gpus if g.source != UNAVAILABLE})
    missing = sum(g.source == UNAVAILABLE for g in e.gpus)
    source = " + ".join("power x time" if s == POWER else s for s in sources)
    if missing:
        source += f" ({missing} GPU{'s' if missing > 1 else ''} unavailable)"
    return c.Energy(joules_per_token=e.joules_per_token, kwh_so_far=e.kwh,
                    kwh_projected=e.projected_kwh, source=source)


def _uploads(u: UploadStatus | None) -> c.Uploads | None:
    if u is None:
        return None
    return c.Uploads(
        destination=u.destination, remote=u.remote, backlog_shards=u.backlog_shards,
        backlog_bytes=u.backlog_bytes, uploaded_shards=u.uploaded_shards,
        uploaded_bytes=u.uploaded_bytes, in_flight=u.in_flight, bytes_per_s=u.bytes_per_s,
        shards_per_s=u.shards_per_s, last_success_at=u.last_success_at,
        consecutive_failures=u.consecutive_failures, last_error=u.last_error,
        corrupt_total=u.corrupt_total, stopped=u.stopped)


def build_status(js: JobStatus, config: JobConfig, *, started_at: float,
                 histogram: tuple[tuple[int, ...], tuple[int, ...], int],
                 flags: FlagSource | None = None,
                 requeueable_truncated: int | None = None,
                 truncated: int | None = None,
                 ledger: TokenLedger | None = None,
                 live_context: int | None = None,
                 continuation: tuple[c.Continuation, ContinuationTotals] | None = None,
                 tuning: Tuning | None = None) -> c.Status:
    """`live_context`: the smallest context length a server runs with now (a retune may
    have changed it since the config was read)."""
    d = js.dispatch
    r, q = d.rates, d.quality
    servers: tuple[ServerSnapshot, ...] = tuple(js.servers)
    edges, counts, samples = histogram
    return c.Status(
        schema_version=c.SCHEMA_VERSION, time=js.time, started_at=started_at,
        daemon_pid=os.getpid(), model=config.job.model, max_tokens=d.max_tokens,
        context_length=(live_context if live_context is not None
                        else config.servers.context_length),
        job=c.JobCounts(total=js.total, done=js.done, pending=js.pending,
                        in_flight=js.in_flight, failed=js.failed,
                        requeueable_truncated=requeueable_truncated, truncated=truncated),
        rates=c.Rates(req_per_s=r.req_per_s, tok_per_s=r.tok_per_s,
                      avg_output_tokens=r.avg_output_tokens, completions=r.completions,
                      window_s=config.quality.metrics_window_s, span_s=r.span_s,
                      warming_up=r.warming_up),
        eta=_eta(js),
        quality=c.Quality(
            window=config.quality.window, samples=q.samples, bad_rate=q.bad_rate,
            truncation_rate=q.truncation_rate,
            problems=tuple(c.ProblemCount(k, v) for k, v in sorted(q.problems.items())),
            checked_total=q.checked_total, bad_total=q.bad_total,
            truncated_total=q.truncated_total, tripped=q.tripped, loop_rate=q.loop_rate,
            looping_total=q.loop_total, long_rate=q.long_rate,
            thinking_truncated_rate=q.thinking_truncated_rate,
            answer_truncated_rate=q.answer_truncated_rate,
            thinking_truncated_total=q.thinking_truncated_total,
            max_thinking_truncated_rate=config.quality.max_thinking_truncated_rate,
            loops_aborted_total=d.streamed.loops_aborted,
            loop_tokens_saved=d.streamed.loop_tokens_saved, stalled_total=d.streamed.stalls),
        paused=tuple(c.PauseReason(k, v) for k, v in d.paused.items()),
        servers=tuple(_server(s, js.time, d.per_server, flags, js.energy) for s in servers),
        gpus=_gpus(js.gpu, servers), uploads=_uploads(js.uploads),
        output_lengths=c.Histogram(edges=edges, counts=counts, samples=samples,
                                   max_tokens=d.max_tokens),
        energy=_energy(js.energy),
        partition=str(config.job.partition) if config.job.partition is not None else None,
        stopping=js.stopping, last_reload=js.last_reload, breaker=_breaker(d.breaker, config),
        waste=_waste(ledger, continuation[1] if continuation else None),
        continuation=continuation[0] if continuation else None, job_name=job_name(config),
        tuning=tuning)


def continuation(figures: Continuable | None, totals: ContinuationTotals
                 ) -> tuple[c.Continuation, ContinuationTotals]:
    """What a raise would continue (`figures`, read in the background: zeros until the
    first read) and the continuations marked now, with the job's totals for the ledger."""
    f = figures or Continuable(answers=0, tokens_kept=0, without_ids=0, longest_prompt=0)
    return c.Continuation(continuable=f.answers, tokens_kept=f.tokens_kept,
                          without_ids=f.without_ids, pending=totals.continuing), totals


def _waste(t: TokenLedger | None, totals: ContinuationTotals | None) -> c.Waste | None:
    if t is None:
        return None
    return c.Waste(kept_tokens=t.kept_tokens, wasted_tokens=t.wasted_tokens, goodput=t.goodput,
                   causes=tuple(c.WasteCount(str(w.cause), w.requests, w.tokens)
                                for w in t.wasted),
                   continued_answers=totals.continued_answers if totals else 0,
                   continued_tokens=totals.continued_tokens if totals else 0)


def _breaker(b: BreakerSnapshot, config: JobConfig) -> c.Breaker:
    return c.Breaker(
        window=config.dispatch.breaker_window, samples=b.samples, error_rate=b.error_rate,
        threshold=config.dispatch.breaker_error_rate,
        errors=tuple(c.ErrorCount(k, v) for k, v in sorted(b.errors_by_kind.items())),
        requests_total=b.requests_total, errors_total=b.errors_total, tripped=b.tripped,
        tripped_error=b.tripped_kind, sample=b.tripped_sample, last_error=b.last_error)
