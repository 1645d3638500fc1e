"""The one-line progress summary (systemd's STATUS=, the demo's output): formatting kept
apart from the status data it reads.

`progress_line(s)` is the whole line (~190 characters mid-job: systemd and log files keep
it all); `progress_line(s, width=79)` fits a terminal: the details go first (energy, the
truncation split, the ETA's range, averages), then figures are shortened, and the counts,
req/s, bad share, ETA, servers and any alarm stay. Only a line that still does not fit
(a long pause reason) is cut, with "…".
"""

from __future__ import annotations

from supervisor.contract.figure_text import duration, pause_text, truncation
from supervisor.job.status import JobStatus
from supervisor.servers.server_state import ServerState

# Which field gives up its next-longer form first, one step at a time, until the line fits:
# what an operator can do without on a narrow terminal comes first.
SHORTEN_ORDER = ("energy", "trunc", "eta", "avg", "trunc", "backlog", "tok", "servers",
                 "eta", "done")


def progress_line(s: JobStatus, width: int | None = None, daemon: bool = True) -> str:
    """`daemon`: a daemon stays to act on (systemd's STATUS=); the demo, which exits when
    every server has FAILED, says so without advice that needs a running daemon."""
    fields = _fields(s, daemon)
    step = {name: 0 for name in fields}
    line = _join(fields, step)
    if width is None:
        return line
    for name in SHORTEN_ORDER:
        if len(line) <= width:
            return line
        if name not in fields:
            continue
        step[name] = min(step[name] + 1, len(fields[name]) - 1)
        line = _join(fields, step)
    if len(line) <= width:
        return line
    return line[: max(0, width - 1)] + "…" if width > 0 else ""


def _join(fields: dict[str, list[str]], step: dict[str, int]) -> str:
    return "  ".join(text for name, forms in fields.items() if (text := forms[step[name]]))


def _fields(s: JobStatus, daemon: bool = True) -> dict[str, list[str]]:
    """Each field's forms, longest first; an empty form drops the field."""
    r = s.dispatch.rates
    q = s.dispatch.quality
    f: dict[str, list[str]] = {}
    if s.stopping:
        # First, so systemctl status shows it even when the line is cut.
        head, _, rest = s.stopping.partition(": ")
        f["stopping"] = [f"{head.upper()}: {rest}" if rest else head.upper()]
    pct = 100.0 * s.done / s.total if s.total else 0.0
    f["done"] = [f"{s.done}/{s.total} ({pct:.0f}%)", f"{s.done}/{s.total}"]
    f["req"] = [f"{r.req_per_s:.1f} req/s"]
    f["tok"] = [f"{_si(r.tok_per_s)} tok/s", ""]
    f["avg"] = [f"avg {r.avg_output_tokens:.0f} tok", ""]
    short_trunc = f"trunc {100 * q.truncation_rate:.1f}%"
    # The rates are the quality window's (its latest answers), not the job's: where there is
    # room, the window's size says so (the demo's summary gives the job's share).
    windowed = truncation(q.truncation_rate, q.thinking_truncated_rate, q.answer_truncated_rate,
                          q.long_rate, q.loop_rate).replace("trunc ", f"trunc (last {q.samples}) ", 1)
    f["trunc"] = [windowed,
                  short_trunc + (f" (loop {100 * q.loop_rate:.1f}%)" if q.loop_rate else ""),
                  short_trunc]
    f["bad"] = [f"bad {100 * q.bad_rate:.1f}%"]
    f["eta"] = _eta_forms(s)
    ready = sum(1 for srv in s.servers if srv.state is ServerState.READY)
    f["servers"] = [f"servers {ready}/{len(s.servers)} ready", f"{ready}/{len(s.servers)} ready"]
    if s.failed:
        f["failed"] = [f"failed {s.failed}"]
    if s.energy is not None and s.energy.available:
        energy = f"{s.energy.kwh:.2f} kWh"
        if s.energy.joules_per_token is not None:
            energy += f" ({s.energy.joules_per_token:.2f} J/tok)"
        f["energy"] = [energy, ""]
    u = s.uploads
    if u is not None:
        # A local output's "backlog" is only the shard being checked: not worth a column.
        if u.remote:
            f["backlog"] = [f"S3 backlog {u.backlog_shards} ({u.backlog_bytes / 1e6:.0f} MB)",
                            f"S3 backlog {u.backlog_shards}"]
        if u.stopped:
            f["uploads"] = [f"UPLOADS STOPPED: {u.stopped}"]
    if s.dispatch.paused:
        f["paused"] = ["; ".join(pause_text(k, v) for k, v in s.dispatch.paused.items())]
    if s.servers and all(srv.state is ServerState.FAILED for srv in s.servers):
        f["all_failed"] = ["EVERY SERVER FAILED: `dflash-supervisor ctl reset NAME` to start "
                           "one again" if daemon else "EVERY SERVER FAILED"]
    elif s.servers and all(srv.state in (ServerState.FAILED, ServerState.GONE)
                           for srv in s.servers):
        # Attached servers that went away are probed until they answer: nothing to reset.
        f["all_failed"] = ["EVERY SERVER DOWN (FAILED or GONE): nothing is generated until "
                           "one is back"]
    return f


def _eta_forms(s: JobStatus) -> list[str]:
    if s.eta_held == "no server up":
        # EVERY SERVER FAILED / DOWN says it; an ETA beside it would be noise.
        return [""]
    if s.eta_held:
        # PAUSED says it where the line is short.
        return [f"ETA on hold ({s.eta_held})", ""]
    eta = duration(s.eta_s)
    e = s.length_eta
    full = eta
    if s.remaining and e is not None and e.low_s is not None and e.high_s is not None:
        full += f" [{duration(e.low_s)}-{duration(e.high_s)}]"
    if s.eta_warming_up:
        # "~": an estimate still settling; the words say so where there is room.
        short = f"ETA ~{eta}" if s.eta_s is not None else f"ETA {eta}"
        return [f"ETA {full} (warming up)", f"ETA {eta} (warming up)", short]
    return [f"ETA {full}", f"ETA {eta}", f"ETA {eta}"]


def _si(x: float) -> str:
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"
