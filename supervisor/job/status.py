"""The job's status snapshot: what the progress line, systemd's STATUS=, `status` and the
control socket show. Built from in-memory figures plus one cheap store query."""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.dispatch.dispatcher import DispatchSnapshot
from supervisor.dispatch.length_eta import EtaEstimate
from supervisor.dispatch.rate_window import eta_seconds
from supervisor.gpu.energy import EnergySnapshot
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
    def eta_held(self) -> str | None:
        """Why no ETA counts down now, though prompts remain: nothing is being generated, so
        a rate from before the pause (or the failures) would count down to a false finish."""
        if not self.remaining:
            return None
        if self.dispatch.paused or self.disk_paused:
            return "paused"
        if self.servers and all(s.state in (ServerState.FAILED, ServerState.GONE)
                                for s in self.servers):
            return "no server up"
        return None

    @property
    def eta_s(self) -> float | None:
        """The length-aware ETA once it has one; the windowed req/s one before; None while
        held (eta_held)."""
        if self.eta_held:
            return None
        if self.length_eta is not None and self.length_eta.eta_s is not None:
            return self.length_eta.eta_s if self.remaining else 0.0
        return self.windowed_eta_s

    @property
    def eta_warming_up(self) -> bool:
        if not self.remaining or self.eta_held:
            return False
        if self.length_eta is not None and self.length_eta.eta_s is not None:
            return self.length_eta.warming_up
        return self.dispatch.rates.warming_up

    @property
    def finished(self) -> bool:
        return self.total > 0 and self.remaining == 0
