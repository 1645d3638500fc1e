"""The job's status snapshot: what the progress line, systemd's STATUS=, `status` and the
control socket show. Built from in-memory figures plus one cheap store query."""

from __future__ import annotations

from dataclasses import asdict, dataclass, is_dataclass
from enum import Enum
from typing import Any

from supervisor.dispatch.dispatcher import DispatchSnapshot
from supervisor.dispatch.length_eta import EtaEstimate
from supervisor.gpu.energy import EnergySnapshot
from supervisor.dispatch.metrics import eta_seconds, format_duration
from supervisor.gpu.snapshot import GpuTelemetry
from supervisor.servers.server_state import ServerSnapshot, ServerState
from supervisor.uploads.upload_status import UploadStatus


@dataclass(frozen=True)
class JobStatus:
    time: float
    elapsed_s: float
    total: int
    done: int
    pending: int
    in_flight: int
    failed: int
    dispatch: DispatchSnapshot
    servers: tuple[ServerSnapshot, ...] = ()
    gpu: GpuTelemetry | None = None
    uploads: UploadStatus | None = None
    disk_paused: str | None = None
    length_eta: EtaEstimate | None = None  # the length-aware ETA
    energy: EnergySnapshot | None = None
    stopping: str | None = None            # a graceful stop in progress: "draining: ..."
    last_reload: str | None = None         # the last config reload's outcome, one line

    @property
    def remaining(self) -> int:
        return self.pending + self.in_flight

    @property
    def windowed_eta_s(self) -> float | None:
        return eta_seconds(self.remaining, self.dispatch.rates.req_per_s)

    @property
    def eta_s(self) -> float | None:
        """The length-aware ETA once it has one; the windowed req/s one before."""
        if self.length_eta is not None and self.length_eta.eta_s is not None:
            return self.length_eta.eta_s if self.remaining else 0.0
        return self.windowed_eta_s

    @property
    def eta_warming_up(self) -> bool:
        if not self.remaining:
            return False
        if self.length_eta is not None and self.length_eta.eta_s is not None:
            return self.length_eta.warming_up
        return self.dispatch.rates.warming_up

    @property
    def finished(self) -> bool:
        return self.total > 0 and self.remaining == 0

    def as_dict(self) -> dict[str, Any]:
        out = _plain(asdict(self))
        out["remaining"] = self.remaining
        out["eta_s"] = self.eta_s
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    return value


def progress_line(s: JobStatus) -> str:
    r = s.dispatch.rates
    q = s.dispatch.quality
    pct = 100.0 * s.done / s.total if s.total else 0.0
    ready = sum(1 for srv in s.servers if srv.state is ServerState.READY)
    eta = format_duration(s.eta_s)
    e = s.length_eta
    if s.remaining and e is not None and e.low_s is not None and e.high_s is not None:
        eta += f" [{format_duration(e.low_s)}-{format_duration(e.high_s)}]"
    eta += " (warming up)" if s.eta_warming_up else ""
    trunc = f"trunc {100 * q.truncation_rate:.1f}%"
    if q.loop_rate:
        trunc += f" (long {100 * q.long_rate:.1f}%, loop {100 * q.loop_rate:.1f}%)"
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
