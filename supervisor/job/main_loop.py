"""One generation job, from the prompts file to the last shard: the daemon's main loop.

Start: open the store, put what a killed daemon left in flight back to pending, import the
prompts file (idempotent), then run the fleet of servers, the dispatcher, the shard writer,
the uploader and telemetry side by side. The job ends when no prompt is pending or in flight
(or, when asked, as soon as dispatch pauses); SIGTERM/SIGINT end it early. Either way the
servers' process groups are stopped, every recorded outcome is committed and shards are
synced before the store closes: the next start resumes exactly.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Any, Callable

import anyio

from state.async_store import AsyncStore
from state.store import Store
from supervisor.config import JobConfig
from supervisor.control.contract import Event, Status, ThroughputPoint
from supervisor.control.socket_file import BoundSocket
from supervisor.dispatch.dispatcher import Dispatcher
from supervisor.gpu import GpuSampler, GpuSource, NvmlSource
from supervisor.job.end_policy import end_reason
from supervisor.job.energy_ledger import EnergyLedger
from supervisor.job.status import JobStatus
from supervisor.job.status_builder import StatusBuilder
from supervisor.job.store_setup import JobError, open_job_store
from supervisor.job.systemd_report import SystemdReport
from supervisor.notify import Notifier
from supervisor.servers.fleet import Fleet, FleetOptions
from supervisor.shards import ShardLoop, ShardWriter, shard_key_for, spool_dir
from supervisor.uploads.disk_guard import DiskGuard
from supervisor.uploads.uploader import Uploader
from supervisor.uploads.wiring import build_uploads

log = logging.getLogger("supervisor.job")


@dataclass(frozen=True)
class JobResult:
    status: JobStatus
    reason: str          # "finished", "paused: ...", "stopped by SIGTERM"

    @property
    def finished(self) -> bool:
        return self.status.finished


class Job:
    def __init__(self, config: JobConfig, *, fleet_options: FleetOptions | None = None,
                 exit_when_paused: bool = False,
                 on_status: Callable[[JobStatus], None] | None = None,
                 status_interval_s: float = 1.0, gpu_source: GpuSource | None = None,
                 handle_signals: bool = True) -> None:
        self.config = config
        self.fleet_options = fleet_options
        self.exit_when_paused = exit_when_paused
        self.on_status = on_status
        self.status_interval_s = status_interval_s
        self.gpu_source = gpu_source
        self.handle_signals = handle_signals
        self.notifier = Notifier()
        self.systemd = SystemdReport(self.notifier)
        self.dispatcher: Dispatcher | None = None
        self.fleet: Fleet | None = None
        self.gpu: GpuSampler | None = None
        self.uploader: Uploader | None = None
        self.disk_guard: DiskGuard | None = None
        self._started = time.time()
        self._reason = "stopped"
        self._status: StatusBuilder | None = None
        self.node_state: Any = None

    # -- setup --------------------------------------------------------------------------------

    def _open_store(self) -> Store:
        return open_job_store(self.config, before_open=self._prepare_node_state,
                              after_open=self._node_state_opened)

    def _prepare_node_state(self) -> None:
        """State backups (a node of a many-node job): refuse a prompt file the other nodes
        do not share, and restore a lost node's DB before it is opened."""
        from supervisor.state_backup.node_state import NodeState
        from supervisor.state_backup.restore import RestoreRefused

        try:
            self.node_state = NodeState.prepare(self.config)
            if self.node_state is not None:
                self.node_state.before_open()
        except RestoreRefused as exc:
            raise JobError(str(exc)) from None

    def _node_state_opened(self, store: Store) -> None:
        if self.node_state is not None:
            self.node_state.after_open(store)

    def _bind_control(self) -> BoundSocket:
        """Before anything else: a second daemon on this socket stops here, touching nothing."""
        from supervisor.control import socket_file

        c = self.config.control
        # A relative control.socket is relative to the config's directory (or --workdir), like
        # every other path in the config: N nodes sharing one config get N sockets.
        configured = str(self.config.path(c.socket)) if c.socket else ""
        path = socket_file.default_socket_path(configured, self.config.path(self.config.job.state))
        try:
            return socket_file.bind(path, socket_file.resolve_group(c.group))
        except socket_file.SocketFileError as exc:
            raise JobError(str(exc)) from None

    def _gpu_sampler(self) -> GpuSampler:
        return GpuSampler(self.gpu_source if self.gpu_source is not None else NvmlSource())

    @property
    def last_status(self) -> JobStatus | None:
        return self._status.last if self._status is not None else None

    # -- run ----------------------------------------------------------------------------------

    async def run(self) -> JobResult:
        bound = await anyio.to_thread.run_sync(self._bind_control)
        try:
            store = await anyio.to_thread.run_sync(self._open_store)
        except BaseException:
            bound.close()
            raise
        astore = AsyncStore(store)
        try:
            return await self._run(astore, bound)
        finally:
            with anyio.CancelScope(shield=True):
                bound.close()
                await anyio.to_thread.run_sync(store.close)
                self.systemd.stopped()

    async def _run(self, astore: AsyncStore, bound: BoundSocket) -> JobResult:
        from supervisor.control.server import ControlServer

        cfg = self.config
        status = self._status = StatusBuilder(astore, self._started)
        spool = spool_dir(cfg)
        spool.mkdir(parents=True, exist_ok=True)
        dispatcher = self.dispatcher = status.dispatcher = Dispatcher(astore, cfg)
        gpu = self.gpu = status.gpu = self._gpu_sampler()
        status.energy = await EnergyLedger.open(astore, cfg)
        # A broken uploads install fails the start here; it must never run an S3 job that
        # uploads nothing and still reports "finished".
        try:
            uploader, disk_guard = build_uploads(cfg, astore, spool)
        except ImportError as exc:
            raise JobError(f"broken installation: {exc}") from None
        self.uploader = status.uploader = uploader
        self.disk_guard = status.disk_guard = disk_guard
        shards = ShardLoop(ShardWriter(astore.store, spool, cfg.job.shard_size,
                                       shard_key_for(cfg.job.partition)),
                           on_written=uploader.poke)
        backup = self.node_state.runner(dispatcher) if self.node_state is not None else None
        # A first verdict before any server is up: never start dispatching onto a full disk.
        await anyio.to_thread.run_sync(disk_guard.check)
        async with dispatcher.running():
            fleet = self.fleet = status.fleet = Fleet(cfg, astore, dispatcher, self.fleet_options)
            await astore.call(Store.add_event, "job_started", "job",
                              {"pid": os.getpid(), "servers": len(fleet.servers)},
                              "supervisor", time.time())
            async with anyio.create_task_group() as tg:
                tg.start_soon(fleet.run, name="fleet")
                control = ControlServer(self, astore, bound, cfg.control.interval_s,
                                        self._control_status)
                tg.start_soon(control.run, name="control socket")
                tg.start_soon(gpu.run, name="gpu telemetry")
                tg.start_soon(shards.run, name="shards")
                tg.start_soon(uploader.run, name="uploads")
                if backup is not None:
                    tg.start_soon(backup.run, name="state backup")
                # Samples free space in a thread; paused_reason() only reads the verdict.
                tg.start_soon(disk_guard.run, name="disk guard")
                if self.handle_signals:
                    tg.start_soon(self._signals, tg.cancel_scope, name="signals")
                await self._watch(status)
                tg.cancel_scope.cancel()
            # Everything that could produce an outcome has stopped; commit the rest.
            await dispatcher.flush()
        final = await status.build()
        # The last, partial shard is only cut when the job is complete: before that the
        # remainder keeps filling up to shard_size, so shards are whole except the last.
        await shards.sync(final.finished)
        if final.finished:
            await uploader.drain()
        final = await status.build()
        await status.energy.save()
        await astore.call(Store.add_event, "job_stopped", "job",
                          {"reason": self._reason, "done": final.done, "failed": final.failed,
                           "pending": final.pending}, "supervisor", time.time())
        if backup is not None:
            # Last, so the copy holds every outcome, the final shards' uploads and the stop.
            await backup.backup_now()
        return JobResult(final, self._reason)

    async def _control_status(self, throughput: tuple[ThroughputPoint, ...],
                              events: tuple[Event, ...]) -> Status:
        assert self._status is not None
        return await self._status.control_status(self.config, throughput, events)

    async def _signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self._reason = f"stopped by {signal.Signals(signum).name}"
                log.warning("%s: stopping servers and saving state", self._reason)
                self.systemd.stopping(self._reason)
                scope.cancel()
                return

    async def _watch(self, status: StatusBuilder) -> None:
        """Until the job is finished (or paused, when asked to stop then)."""
        while True:
            await self._apply_disk_guard()
            snapshot = await status.build()
            self.systemd.ready()
            if self.on_status is not None:
                self.on_status(snapshot)
            self.systemd.progress(snapshot)
            reason = end_reason(snapshot, self.exit_when_paused)
            if reason is not None:
                self._reason = reason
                return
            await anyio.sleep(self.status_interval_s)

    async def _apply_disk_guard(self) -> None:
        if self.disk_guard is None or self.dispatcher is None:
            return
        reason = self.disk_guard.paused_reason()
        if reason:
            await self.dispatcher.pause("disk", reason, "disk-guard")
        else:
            await self.dispatcher.resume("disk", "disk-guard")
