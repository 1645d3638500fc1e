"""One generation job, from the prompts file to the last shard: the daemon's main loop.

Start: open the store, put what a killed daemon left in flight back to pending, import the
prompts file (idempotent), then run the fleet of servers, the dispatcher, the shard writer,
the uploader and telemetry side by side. The job ends when no prompt is pending or in flight
(or, when asked, as soon as dispatch pauses); SIGTERM/SIGINT end it early, gracefully: the
requests in flight get dispatch.stop_grace_s to finish (graceful_stop.py), a second signal
cuts that short. Either way the servers' process groups are stopped, every recorded outcome
is committed and shards are synced before the store closes: the next start resumes exactly.
SIGHUP re-reads the config (reload.py). A job already finished at start launches no server:
it only finishes its shards and uploads.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio

from state.async_store import AsyncStore
from state.store import Store
from supervisor.config import JobConfig
from supervisor.config.live_settings import LiveSettings
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.pause_sources import PauseSource
from supervisor.contract.status import Status
from supervisor.control import socket_file
from supervisor.control.server import ControlServer
from supervisor.dispatch.dispatcher import Dispatcher
from supervisor.gpu import GpuSampler, GpuSource, NvmlSource
from supervisor.job.all_failed_alarm import AllFailedAlarm
from supervisor.job.end_policy import end_reason
from supervisor.job.energy_ledger import EnergyLedger
from supervisor.job.graceful_stop import GracefulStop
from supervisor.job.job_start import JobStart
from supervisor.job.notify import Notifier
from supervisor.job.reload import reload_job
from supervisor.job.status import JobStatus
from supervisor.job.status_builder import StatusBuilder
from supervisor.job.store_setup import JobError
from supervisor.job.systemd_report import SystemdReport
from supervisor.job.unit_job import keep_servers_on_sigterm
from supervisor.servers.fleet import Fleet, FleetOptions
from supervisor.servers.launcher_choice import choose_launcher
from supervisor.shards import ShardLoop, ShardWriter, shard_key_for, spool_dir
from supervisor.shards.verify import send_back, verify_output
from supervisor.state_backup.backup import StateBackup
from supervisor.tune.kept_flags import restore_kept_flags
from supervisor.tune.tuner import Tuner, start_from_config
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
                 handle_signals: bool = True,
                 reload_config: Callable[[], JobConfig] | None = None) -> None:
        # The job's settings as they are now: every part reads them there
        # (config/live_settings.py); `config` below is a view of them.
        self.live = LiveSettings(config)
        # How SIGHUP re-reads the config (as it was read at start), and the config as last
        # read (what a reload is compared with).
        self.reload_config = reload_config
        self.file_config = config
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
        self.tuner: Tuner | None = None
        self.gpu: GpuSampler | None = None
        self.uploader: Uploader | None = None
        self.disk_guard: DiskGuard | None = None
        self._started = time.time()
        self._reason = "stopped"
        self._status: StatusBuilder | None = None
        # The lock, the control socket and the store, taken before the run (job_start.py).
        self.startup = JobStart(self.live)
        self._stop: GracefulStop | None = None
        self._stop_requested = anyio.Event()
        self.reload_lock = anyio.Lock()
        self.task_group: anyio.abc.TaskGroup | None = None   # where a reload's roll runs
        # How often "every server FAILED" is logged again while it lasts.
        self.all_failed_warn_s = 60.0

    @property
    def config(self) -> JobConfig:
        return self.live.config

    # -- setup --------------------------------------------------------------------------------

    def _gpu_sampler(self) -> GpuSampler:
        return GpuSampler(self.gpu_source if self.gpu_source is not None else NvmlSource())

    @property
    def last_status(self) -> JobStatus | None:
        return self._status.last if self._status is not None else None

    # -- run ----------------------------------------------------------------------------------

    async def run(self) -> JobResult:
        async with self.startup.held(on_released=self.systemd.stopped) as (bound, store):
            return await self._run(AsyncStore(store), bound)

    async def _run(self, astore: AsyncStore, bound: socket_file.BoundSocket) -> JobResult:
        cfg = self.config
        fleet_options = self._fleet_options()
        status = self._status = StatusBuilder(astore, self._started)
        spool = spool_dir(cfg)
        await anyio.to_thread.run_sync(functools.partial(spool.mkdir, parents=True, exist_ok=True))
        dispatcher = self.dispatcher = status.dispatcher = Dispatcher(astore, self.live)
        self.gpu = status.gpu = self._gpu_sampler()
        status.energy = await EnergyLedger.open(astore, cfg)
        # A broken uploads install fails the start here; it must never run an S3 job that
        # uploads nothing and still reports "finished".
        try:
            # In a thread: building a sink resolves paths and creates clients (blocking calls).
            uploader, disk_guard = await anyio.to_thread.run_sync(build_uploads, cfg, astore, spool)
        except ImportError as exc:
            raise JobError(f"broken installation: {exc}") from None
        self.uploader = status.uploader = uploader
        self.disk_guard = status.disk_guard = disk_guard
        shards = ShardLoop(ShardWriter(astore.store, spool, cfg.job.shard_size,
                                       shard_key_for(cfg.job.partition),
                                       output_ids=cfg.job.shard_output_ids),
                           on_written=uploader.poke)
        node_state = self.startup.node_state
        backup = node_state.runner(dispatcher) if node_state is not None else None
        # A first verdict before any server is up: never start dispatching onto a full disk.
        await anyio.to_thread.run_sync(disk_guard.check)
        counts = await astore.call(Store.counts)
        already_finished = counts.total > 0 and counts.pending + counts.in_flight == 0
        async with dispatcher.running():
            fleet = self.fleet = status.fleet = Fleet(self.live, astore, dispatcher,
                                                      fleet_options)
            fleet.left_in_flight = self.startup.left_in_flight
            await restore_kept_flags(self.live, astore, [s.name for s in fleet.own_servers])
            self.tuner = status.tuner = Tuner(
                fleet, dispatcher, astore, self.live,
                eta=lambda: status.last.eta_s if status.last is not None else None)
            await astore.call(Store.add_event, EventKind.JOB_STARTED, "job",
                              {"pid": os.getpid(), "servers": len(fleet.servers),
                               "already_finished": already_finished},
                              "supervisor", time.time())
            if already_finished:
                # Started again after the end: loading a model on every GPU only to stop it
                # is minutes for nothing. Only what a killed daemon left running is stopped;
                # the shards and uploads are finished below.
                log.info("the job is already finished (%d done, %d failed): no server started",
                         counts.done, counts.failed)
                self._reason = "finished"
                if fleet.options.cleanup_orphans:
                    await fleet.stop_orphans()
                self.systemd.ready()
            else:
                await self._supervise(astore, bound, status, shards, backup)
            # Everything that could produce an outcome has stopped; commit the rest.
            await dispatcher.flush()
        final = await status.build()
        if final.finished:
            self._reason = "finished"     # also when the last requests ended in a stop's grace
        # The last, partial shard is only cut when the job is complete: before that the
        # remainder keeps filling up to shard_size, so shards are whole except the last.
        await shards.sync(final.finished)
        if final.finished:
            await uploader.drain()
            await self._final_check(shards, astore, uploader)
        final = await status.build()
        await status.energy.save()
        detail: dict[str, Any] = {"reason": self._reason, "done": final.done,
                                  "failed": final.failed, "pending": final.pending}
        if self._stop is not None and self._stop.report is not None:
            detail.update(self._stop.report.as_detail())
            log.warning("%s: %s", self._reason, self._stop.report.line())
        await astore.call(Store.add_event, EventKind.JOB_STOPPED, "job", detail, "supervisor",
                          time.time())
        if backup is not None:
            # Last, so the copy holds every outcome, the final shards' uploads and the stop.
            await backup.backup_now()
        return JobResult(final, self._reason)

    def _fleet_options(self) -> FleetOptions:
        """The fleet's options with its launcher chosen now, before anything runs: a
        launcher this build lacks (`servers.launcher`) stops the start with one line."""
        options = self.fleet_options or FleetOptions()
        if options.launcher is not None:
            return options
        try:
            launcher = choose_launcher(self.config.servers.launcher, options.base_env)
        except ValueError as exc:
            raise JobError(str(exc)) from None
        return replace(options, launcher=launcher)

    async def _supervise(self, astore: AsyncStore, bound: socket_file.BoundSocket,
                         status: StatusBuilder, shards: ShardLoop,
                         backup: StateBackup | None) -> None:
        """Servers, dispatch and the rest side by side, until the job ends or is stopped."""
        cfg, fleet, gpu = self.config, self.fleet, self.gpu
        uploader, disk_guard = self.uploader, self.disk_guard
        assert fleet is not None and gpu is not None
        assert uploader is not None and disk_guard is not None
        async with anyio.create_task_group() as tg:
            self.task_group = tg
            tg.start_soon(fleet.run, name="fleet")
            control = ControlServer(self, astore, bound, cfg.control.interval_s,
                                    self._control_status, self.startup.metrics_sock)
            tg.start_soon(control.run, name="control socket")
            tg.start_soon(gpu.run, name="gpu telemetry")
            tg.start_soon(status.continuable.run, name="continuable answers")
            tg.start_soon(shards.run, name="shards")
            tg.start_soon(uploader.run, name="uploads")
            if backup is not None:
                tg.start_soon(backup.run, name="state backup")
            # Samples free space in a thread; paused_reason() only reads the verdict.
            tg.start_soon(disk_guard.run, name="disk guard")
            if self.handle_signals:
                tg.start_soon(self._signals, name="signals")
            if cfg.tune.enabled and self.tuner is not None:
                await start_from_config(self.tuner, tg)
            await self._watch(status)
            if self._stop is not None:
                await self._drain(status, self._stop)
            self.task_group = None
            tg.cancel_scope.cancel()

    async def _final_check(self, shards: ShardLoop, astore: AsyncStore,
                           uploader: Uploader) -> None:
        """At the end of a finished job every shard is checked once more; what is missing or
        changed is rewritten and delivered again before the job calls itself done."""
        sink, spool = uploader.sink, spool_dir(self.config)
        for _ in range(2):
            report = await anyio.to_thread.run_sync(
                lambda: verify_output(astore.store, sink, spool, self.config.job.partition,
                                      list_output=False))
            for problem in report.unverified:
                log.warning("could not verify a shard at the end: %s", problem)
            if not report.mismatched:
                log.info("output checked at the end: %s", report.summary())
                return
            await anyio.to_thread.run_sync(send_back, astore.store, report, "supervisor")
            await shards.sync(True)
            await uploader.drain()

    async def _control_status(self) -> Status:
        assert self._status is not None
        return await self._status.control_status(self.config)

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    # systemctl reload: ExecReload sends it on the operator's behalf.
                    if self.task_group is not None:
                        self.task_group.start_soon(self.reload, "systemd", name="reload")
                else:
                    if signum == signal.SIGTERM and self._stop is None:
                        await self._servers_outlive_this_stop()
                    self.request_stop(signal.Signals(signum).name)

    async def _servers_outlive_this_stop(self) -> None:
        """On SIGTERM, with the servers in systemd units of their own: a restart of the
        daemon's unit leaves them running for the next daemon; a stop stops them
        (job/unit_job.py says how the two are told apart)."""
        fleet = self.fleet
        if fleet is None or fleet.launcher.kind != "systemd":
            return
        keep, why = await anyio.to_thread.run_sync(keep_servers_on_sigterm)
        log.warning("%s", why)
        if keep:
            fleet.keep_servers_on_exit = True

    def request_stop(self, why: str) -> None:
        """The first request drains gracefully; the next one cuts the grace short."""
        if self._stop is not None:
            log.warning("second %s: cutting the grace short, stopping the servers", why)
            self._stop.cut(f"second {why}")
            return
        self._reason = f"stopped by {why}"
        grace = self.config.dispatch.stop_grace_s
        in_flight = len(self.dispatcher.in_flight_requests()) if self.dispatcher else 0
        log.warning("%s: claiming nothing more; %d requests in flight get up to %g s to finish "
                    "(%s again cuts this short)", self._reason, in_flight, grace, why)
        self._stop = GracefulStop(grace)
        if self.dispatcher is not None:
            # At once, not when the drain task starts: no request may begin in between.
            self.dispatcher.stop_claiming()
            self._stop.completed_at_signal = self.dispatcher.completed_total()
        if self._status is not None:
            self._status.stop = self._stop
        self.systemd.stopping(f"DRAINING: {in_flight} requests in flight, up to {grace:g} s")
        self._stop_requested.set()

    async def _drain(self, status: StatusBuilder, stop: GracefulStop) -> None:
        """The grace: requests in flight finish while STATUS= and the watchdog pings go on
        (a drain longer than WatchdogSec must not look like a wedged daemon)."""
        assert self.dispatcher is not None
        async with anyio.create_task_group() as tg:
            async def drain() -> None:
                await stop.drain(self.dispatcher)
                tg.cancel_scope.cancel()

            tg.start_soon(drain)
            while True:
                snapshot = await status.build()
                if self.on_status is not None:
                    self.on_status(snapshot)
                self.systemd.progress(snapshot)
                await anyio.sleep(min(self.status_interval_s, 1.0))

    async def reload(self, actor: str = "systemd") -> str:
        """Re-read the config file and apply what changed; see reload.py."""
        line = await reload_job(self, actor)
        if self._status is not None:
            self._status.last_reload = line
        return line

    async def _watch(self, status: StatusBuilder) -> None:
        """Until the job is finished (or paused, when asked to stop then)."""
        alarm = AllFailedAlarm(self.all_failed_warn_s)
        while True:
            await self._apply_disk_guard()
            snapshot = await status.build()
            self.systemd.ready()
            reason = end_reason(snapshot, self.exit_when_paused)
            if reason is None:
                # A job that ends now says why once, as its end reason; the alarm is for a
                # daemon that stays and waits for an operator.
                alarm.check(snapshot)
            if self.on_status is not None:
                self.on_status(snapshot)
            self.systemd.progress(snapshot)
            if reason is not None:
                self._reason = reason
                return
            if self._stop is not None:
                return
            with anyio.move_on_after(self.status_interval_s):
                await self._stop_requested.wait()

    async def _apply_disk_guard(self) -> None:
        if self.disk_guard is None or self.dispatcher is None:
            return
        reason = self.disk_guard.paused_reason()
        if reason:
            await self.dispatcher.pause(PauseSource.DISK, reason, "disk-guard")
        else:
            await self.dispatcher.resume(PauseSource.DISK, "disk-guard")
