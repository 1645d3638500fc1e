"""The one-line progress summary (systemd's STATUS=, the demo's output): formatting kept
apart from the status data it reads."""

from __future__ import annotations

from supervisor.client.text import duration, truncation
from supervisor.job.status import JobStatus
from supervisor.servers.server_state import ServerState


def progress_line(s: JobStatus) -> str:
    r = s.dispatch.rates
    q = s.dispatch.quality
    pct = 100.0 * s.done / s.total if s.total else 0.0
    ready = sum(1 for srv in s.servers if srv.state is ServerState.READY)
    eta = duration(s.eta_s)
    e = s.length_eta
    if s.remaining and e is not None and e.low_s is not None and e.high_s is not None:
        eta += f" [{duration(e.low_s)}-{duration(e.high_s)}]"
    eta += " (warming up)" if s.eta_warming_up else ""
    trunc = truncation(q.truncation_rate, q.thinking_truncated_rate, q.answer_truncated_rate,
                       q.long_rate, q.loop_rate)
    parts = [
        f"{s.done}/{s.total} ({pct:.0f}%)",
        f"{r.req_per_s:.1f} req/s",
        f"{_si(r.tok_per_s)} tok/s",
        f"avg {r.avg_output_tokens:.0f} tok",
        trunc,
        f"bad {100 * q.bad_rate:.1f}%",
        f"ETA {eta}",
        f"servers {ready}/{len(s.servers)} ready",
    ]
    if s.failed:
        parts.append(f"failed {s.failed}")
    if s.energy is not None and s.energy.available:
        energy = f"{s.energy.kwh:.2f} kWh"
        if s.energy.joules_per_token is not None:
            energy += f" ({s.energy.joules_per_token:.2f} J/tok)"
        parts.append(energy)
    u = s.uploads
    if u is not None:
        # A local output's "backlog" is only the shard being checked: not worth a column.
        if u.remote:
            parts.append(f"S3 backlog {u.backlog_shards} ({u.backlog_bytes / 1e6:.0f} MB)")
        if u.stopped:
            parts.append(f"UPLOADS STOPPED: {u.stopped}")
    if s.dispatch.paused:
        parts.append("PAUSED: " + "; ".join(s.dispatch.paused.values()))
    if s.servers and all(srv.state is ServerState.FAILED for srv in s.servers):
        parts.append("EVERY SERVER FAILED: `dflash-supervisor ctl reset NAME` to start one again")
    if s.stopping:
        # First, so systemctl status shows it even when the line is cut.
        head, _, rest = s.stopping.partition(": ")
        parts.insert(0, f"{head.upper()}: {rest}" if rest else head.upper())
    return "  ".join(parts)


def _si(x: float) -> str:
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"
