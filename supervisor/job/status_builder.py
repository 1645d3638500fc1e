"""Building the job's status snapshot from its parts: one cheap store call (the counts and
the other figures of state/status_reads.py) plus what the dispatcher, fleet, GPU sampler,
uploader and disk guard hold in memory; and the control socket's richer status on top of it."""

from __future__ import annotations

import time

from state.async_store import AsyncStore
from state.status_reads import StatusFigures
from state.store import Store
from supervisor.config import JobConfig
from supervisor.contract.status import Status
from supervisor.dispatch.dispatcher import Dispatcher
from supervisor.gpu.sampler import GpuSampler
from supervisor.job.continuable_reader import ContinuableReader
from supervisor.job.contract_status import build_status, continuation
from supervisor.job.energy_ledger import EnergyLedger
from supervisor.job.graceful_stop import GracefulStop
from supervisor.job.status import JobStatus
from supervisor.servers.fleet import Fleet
from supervisor.tune.tuner import Tuner
from supervisor.uploads.disk_guard import DiskGuard
from supervisor.uploads.uploader import Uploader


class StatusBuilder:
    def __init__(self, astore: AsyncStore, started_at: float) -> None:
        self.astore = astore
        self.started_at = started_at
        # The parts appear as the job starts them; a part not there yet is left out.
        self.dispatcher: Dispatcher | None = None
        self.fleet: Fleet | None = None
        self.tuner: Tuner | None = None
        self.gpu: GpuSampler | None = None
        self.uploader: Uploader | None = None
        self.disk_guard: DiskGuard | None = None
        self.energy: EnergyLedger | None = None
        self.stop: GracefulStop | None = None     # once SIGTERM came
        self.last_reload: str | None = None
        self.last: JobStatus | None = None
        # What a raise would continue: read in the background (the job runs `continuable.run`).
        self.continuable = ContinuableReader(astore.store.path)
        self._continuation_seen: tuple[int, int, int] | None = None

    async def build(self, figures: StatusFigures | None = None) -> JobStatus:
        assert self.dispatcher is not None
        d = self.dispatcher
        if figures is None:
            figures = await self.astore.call(Store.status_figures, d.max_tokens)
        counts, floors = figures.counts, figures.pending_floors
        now = time.time()
        snap = d.snapshot()
        servers = tuple(self.fleet.snapshot()) if self.fleet is not None else ()
        gpu = self.gpu.latest if self.gpu is not None else None
        # Prompts not yet on the wire: pending, plus claimed ones waiting in a buffer.
        waiting = max(0, counts.pending + counts.in_flight - d.eta.running)
        eta = d.eta.estimate(waiting, d.max_tokens, now, pending_floors=floors)
        energy = None
        if self.energy is not None:
            r = snap.rates
            energy = await self.energy.update(
                gpu, window_tokens=r.tok_per_s * r.span_s,
                server_tokens={n: p.tok_per_s * p.span_s for n, p in snap.per_server.items()},
                server_gpus={s.name: tuple(s.gpus) for s in servers},
                remaining_tokens=eta.remaining_tokens, now=now)
        status = JobStatus(
            time=now, elapsed_s=now - self.started_at, total=counts.total, done=counts.done,
            pending=counts.pending, in_flight=counts.in_flight, failed=counts.failed,
            dispatch=snap, servers=servers, gpu=gpu,
            uploads=self.uploader.status() if self.uploader is not None else None,
            disk_paused=self.disk_guard.paused_reason() if self.disk_guard is not None else None,
            length_eta=eta, energy=energy,
            stopping=(self.stop.describe(len(self.dispatcher.in_flight_requests()))
                      if self.stop is not None and self.stop.active else None),
            last_reload=self.last_reload)
        self.last = status
        return status

    async def control_status(self, config: JobConfig) -> Status:
        """The control socket's status: the job status plus what only the socket serves
        (output-length histogram, server flags); the hub adds its throughput history and
        recent events."""
        d = self.dispatcher
        assert d is not None
        # One store call for every figure (one turn in the store's queue, not five): the
        # truncated answers a requeue would re-run now (the TUI's confirmation says how
        # many) and after max tokens is raised past every old limit, the waste ledger.
        figures = await self.astore.call(Store.status_figures, d.max_tokens)
        js = await self.build(figures)
        totals = figures.continuation
        seen = (figures.truncated, totals.continuing, totals.continued_answers)
        if seen != self._continuation_seen:
            self._continuation_seen = seen
            self.continuable.want_fresh()
        return build_status(js, config, started_at=self.started_at,
                            histogram=d.lengths.histogram(d.max_tokens), flags=self.fleet,
                            requeueable_truncated=figures.requeueable_truncated,
                            truncated=figures.truncated, ledger=figures.ledger,
                            live_context=d.live.context_length,
                            continuation=continuation(self.continuable.latest, totals),
                            tuning=self.tuner.tuning() if self.tuner is not None else None)
