"""Plain-text views of contract records for `status` and `ctl` (and anything else that
prints): the formatting lives here, not in the data. Standard library only. `duration` and
`truncation` live in contract/figure_text.py (the daemon's own lines use them too) and are
imported from here by the clients."""

from __future__ import annotations

import json
import time

from supervisor.client.tuning_text import tune_start_text, tune_stop_text, tuning_lines
from supervisor.contract import status as c
from supervisor.contract.actions import (
    MaxTokensResult,
    PauseResult,
    RequeueResult,
    ResetResult,
    RestartResult,
    ResumeResult,
    RetuneResult,
)
from supervisor.contract.figure_text import duration, truncation
from supervisor.contract.tuning import TuneStartResult, TuneStopResult


def si(x: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.1f}{unit}"
    return f"{x:.0f}"


def size(nbytes: int | None) -> str:
    return "--" if nbytes is None else si(nbytes) + "B"


def clock(t: float | None) -> str:
    return "--" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def eta(e: c.Eta) -> str:
    if e.held:
        return f"on hold ({e.held})"
    text = duration(e.seconds)
    if e.low_s is not None and e.high_s is not None:
        text += f" ({duration(e.low_s)}..{duration(e.high_s)})"
    return text + (" (warming up)" if e.warming_up else "")


def progress_line(s: c.Status) -> str:
    j, r, q = s.job, s.rates, s.quality
    pct = 100.0 * j.done / j.total if j.total else 0.0
    ready = sum(1 for srv in s.servers if srv.state is c.ServerState.READY)
    parts = [f"{j.done}/{j.total} ({pct:.1f}%)", f"{r.req_per_s:.1f} req/s",
             f"{si(r.tok_per_s)} tok/s", f"avg {r.avg_output_tokens:.0f} tok",
             truncation(q.truncation_rate, q.thinking_truncated_rate, q.answer_truncated_rate,
                        q.long_rate, q.loop_rate), f"bad {100 * q.bad_rate:.1f}%",
             f"ETA {eta(s.eta)}", f"servers {ready}/{len(s.servers)} ready"]
    if j.failed:
        parts.append(f"failed {j.failed}")
    if q.loops_aborted_total:
        parts.append(f"loops stopped {q.loops_aborted_total} "
                     f"(saved {si(q.loop_tokens_saved or 0)} tok)")
    if q.stalled_total:
        parts.append(f"stalled {q.stalled_total}")
    return "  ".join(parts)


def clipped(text: str, width: int) -> str:
    """`text` in at most `width` characters, its cut said by an ellipsis."""
    return text if len(text) <= width else text[:width - 1] + "…"


def event_line(e: c.Event) -> str:
    who = e.actor if e.caller is None else f"{e.caller.user}(uid {e.caller.uid}, pid {e.caller.pid})"
    return (f"{clock(e.time)}  #{e.id:<6} {e.kind:<16} {e.subject:<12} {who:<24} "
            f"{clipped(e.detail_json, 140)}")


def sglang_line(srv: c.ServerStatus) -> str:
    """SGLang's own figures for a server (its /metrics), and the over-commit flag."""
    def n(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.0f}"
    parts = [f"{n(srv.sglang_running)} running", f"{n(srv.sglang_queued)} queued",
             "KV n/a" if srv.token_usage is None else f"KV {100 * srv.token_usage:.0f}%",
             f"{n(srv.gen_throughput)} tok/s"]
    if srv.retractions_per_s:
        parts.append(f"{srv.retractions_per_s * 60:.0f} retracted/min")
    text = "sglang   " + ", ".join(parts)
    if srv.sglang_error:
        text += f" ({srv.sglang_error})"
    if srv.overcommitted:
        text += f"; OVER-COMMITTED: {srv.overcommit_reason or ''}"
    return text


def limit_text(srv: c.ServerStatus) -> str:
    """The in-flight limit in force: the max, or the lower limit the saturation guard set,
    marked with an arrow ("20↓" of a 24-slot server)."""
    lim = srv.inflight_limit
    return f"{lim}↓" if lim is not None and lim < srv.max_running else str(srv.max_running)


def waste_line(w: c.Waste) -> str:
    """Goodput and what was thrown away, by cause (causes with nothing left out)."""
    goodput = "--" if w.goodput is None else f"{100 * w.goodput:.1f}%"
    causes = ", ".join(f"{x.cause} {si(x.tokens)}" for x in w.causes if x.tokens)
    text = (f"goodput {goodput}: {si(w.kept_tokens)} tokens kept, {si(w.wasted_tokens)} "
            f"wasted" + (f" ({causes})" if causes else ""))
    if w.continued_tokens:
        text += (f"; {si(w.continued_tokens)} not decoded again by continuing "
                 f"{w.continued_answers:,} truncated answers")
    return text


def continuation_line(cont: c.Continuation, max_tokens: int) -> str | None:
    """What a raise of max tokens would continue now (None: nothing truncated to speak of)."""
    if not (cont.continuable or cont.without_ids or cont.pending):
        return None
    parts = []
    if cont.pending:
        parts.append(f"{cont.pending:,} continuing now (they go out before fresh prompts)")
    if cont.continuable or cont.without_ids:
        parts.append(f"{cont.continuable:,} truncated answers can be continued "
                     f"({si(cont.tokens_kept)} tokens kept): ctl max-tokens N "
                     f"--continue-truncated with N above {max_tokens:,}")
    if cont.without_ids:
        parts.append(f"{cont.without_ids:,} have no stored tokens (re-run from the start)")
    return "; ".join(parts)


def report(s: c.Status, source: str) -> str:
    j = s.job
    out = [f"live from the daemon (pid {s.daemon_pid}) on {source}, up {duration(s.time - s.started_at)}",
           f"prompts  {progress_line(s)}",
           f"         {j.pending} pending, {j.in_flight} in flight, {j.failed} failed; "
           f"max tokens {s.max_tokens}" + (f" (context {s.context_length})"
                                           if s.context_length else "")]
    if s.stopping:
        out.append(f"STOPPING {s.stopping}")
    for p in s.paused:
        out.append(f"PAUSED   ({p.source}) {p.reason}")
    if s.last_reload:
        out.append(f"config   {s.last_reload}")
    if s.quality.tripped:
        out.append(f"quality  {s.quality.tripped}")
    if s.waste is not None:
        out.append(f"waste    {waste_line(s.waste)}")
    cont = continuation_line(s.continuation, s.max_tokens) if s.continuation else None
    if cont:
        out.append(f"continue {cont}")
    for i, line in enumerate(tuning_lines(s.tuning)):
        out.append(("tuning   " if i == 0 else " " * 9) + line)
    b = s.breaker
    if b is not None and b.samples and b.error_rate:
        kinds = ", ".join(f"{e.kind} {e.count}" for e in b.errors)
        out.append(f"errors   {100 * b.error_rate:.0f}% of the last {b.samples} requests "
                   f"(pauses above {100 * b.threshold:.0f}%): {kinds}"
                   + (f"; latest: {b.last_error[:160]}" if b.last_error else ""))
    out.append("servers  name      state     in-flight  req/s  restarts  uptime   last exit")
    for srv in s.servers:
        out.append(f"         {srv.name:<9} {srv.state.value:<9} {srv.in_flight:>4}/{limit_text(srv):<4} "
                   f"{srv.req_per_s:>6.1f}  {srv.restarts:>8}  {duration(srv.uptime_s):>7}  "
                   f"{srv.last_exit_reason or ''}")
        if srv.attached_url is not None:
            out.append(f"           attached {srv.attached_url} (not launched, restarted or "
                       "stopped by the daemon)")
        if srv.state in (c.ServerState.FAILED, c.ServerState.BACKOFF, c.ServerState.GONE) \
                or srv.state_reason.startswith("adopted pid"):
            # An adopted server's life says so while it lasts: "adopted pid 4242, up 3h12m".
            out.append(f"           {srv.state_reason}")
        if srv.sglang_metrics:
            out.append(f"           {sglang_line(srv)}")
        elif srv.sglang_error:      # not read at all: why (metrics switched off: blind)
            out.append(f"           sglang   {srv.sglang_error}")
        if srv.waiting:
            out.append(f"           {srv.waiting} waiting: silent while the server streams "
                       "for others (queued or retracted by SGLang)")
        if srv.inflight_limit is not None and srv.inflight_limit < srv.max_running:
            out.append(f"           in-flight limit {srv.inflight_limit} of {srv.max_running}"
                       f": {srv.inflight_limit_reason or 'lowered by the saturation guard'}")
    if s.gpus.available:
        for g in s.gpus.gpus:
            mem = (f"{size(g.memory_used_bytes)}/{size(g.memory_total_bytes)}")
            power = "--" if g.power_w is None else f"{g.power_w:.0f}W"
            limit = "" if g.power_limit_w is None else f"/{g.power_limit_w:.0f}W"
            util = "--" if g.utilization_pct is None else f"{g.utilization_pct:.0f}%"
            temp = "--" if g.temperature_c is None else f"{g.temperature_c:.0f}C"
            out.append(f"gpu {g.index:<4} {power}{limit}  util {util}  mem {mem}  {temp}  "
                       f"{g.server or ''}")
    else:
        out.append(f"gpus     unavailable: {s.gpus.reason}")
    u = s.uploads
    if u is not None:
        state = f"STOPPED: {u.stopped}" if u.stopped else f"{size(int(u.bytes_per_s))}/s"
        out.append(f"uploads  {u.destination}: {u.uploaded_shards} uploaded "
                   f"({size(u.uploaded_bytes)}), backlog {u.backlog_shards} "
                   f"({size(u.backlog_bytes)}), {state}, last {clock(u.last_success_at)}")
        if u.last_error and u.consecutive_failures:
            out.append(f"         {u.consecutive_failures} failures in a row: {u.last_error[:160]}")
    for e in s.recent_events[-10:]:
        out.append(event_line(e))
    return "\n".join(out)


def result_text(record: object) -> str:
    """One readable line for an action's answer."""
    if isinstance(record, MaxTokensResult):
        more = f", {record.requeued} truncated prompts requeued" if record.requeued is not None else ""
        if record.continued is not None:
            more += (f", {record.continued:,} truncated answers to be continued "
                     f"({record.tokens_kept or 0:,} tokens kept)")
            if record.from_scratch:
                more += (f"; {record.from_scratch:,} answers had no stored tokens: re-run "
                         f"from the start")
        return f"max tokens {record.old} -> {record.new}{more}"
    if isinstance(record, RequeueResult):
        left = (f"; {record.loops_left} looping ones left (--include-loops re-runs them)"
                if record.loops_left else "")
        return f"{record.count} {record.what} prompts back to pending{left}"
    if isinstance(record, PauseResult):
        return ("paused: " if record.changed else "already paused: ") + record.reason
    if isinstance(record, ResumeResult):
        lifted = "; ".join(f"{p.source}: {p.reason}" for p in record.lifted) or "nothing to lift"
        still = "; ".join(f"{p.source}: {p.reason}" for p in record.paused)
        return f"resumed ({lifted})" + (f"; still paused by {still}" if still else "")
    if isinstance(record, RestartResult):
        return f"restarting {', '.join(record.order)} in this order (each READY before the next)"
    if isinstance(record, RetuneResult):
        changes = ", ".join(f"{ch.name}: {json.dumps(ch.old)} -> {json.dumps(ch.new)}"
                            for ch in record.changes)
        return f"retune {changes}; restarting {', '.join(record.order)} in this order"
    if isinstance(record, ResetResult):
        return f"{record.server} was {record.was.value}: starting again"
    if isinstance(record, TuneStartResult):
        return tune_start_text(record)
    if isinstance(record, TuneStopResult):
        return tune_stop_text(record)
    return str(record)
