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
from pathlib import Path
from typing import Any, Callable

import anyio

from state.async_store import AsyncStore
from state.store import Store
from supervisor.config import JobConfig, Partition
from supervisor.control.contract import Status
from supervisor.control.socket_file import BoundSocket
from supervisor.dispatch.dispatcher import Dispatcher
from supervisor.job_status import JobStatus, progress_line
from supervisor.notify import Notifier
from supervisor.servers.fleet import Fleet, FleetOptions

log = logging.getLogger("supervisor.job")

SETTING_IMPORTED = "imported_prompts"


class JobError(RuntimeError):
    """The job cannot start (no prompts, unreadable prompts file...)."""


@dataclass(frozen=True)
class JobResult:
    status: JobStatus
    reason: str          # "finished", "paused: ...", "stopped by SIGTERM"

    @property
    def finished(self) -> bool:
        return self.status.finished


def shard_key_for(partition: Partition | None) -> Callable[[int], str]:
    """Deterministic shard keys; with a partition the node's part is in the key so N nodes
    can write into one prefix without colliding."""
    if partition is None:
        return lambda seq: f"shard-{seq:06d}.jsonl"
    prefix = f"part-{partition.index:04d}-of-{partition.count:04d}/"
    return lambda seq: f"{prefix}shard-{seq:06d}.jsonl"


def spool_dir(config: JobConfig) -> Path:
    """Where shard files are written: the output directory itself for a local output,
    a local spool for S3."""
    if config.output_is_s3:
        return config.path(config.uploads.spool_dir)
    return config.path(config.job.output)


def _import_prompts(store: Store, config: JobConfig) -> None:
    """Import the prompts file unless this exact file (size and mtime) was imported before:
    re-reading a million lines at every restart is wasted minutes, and importing is
    idempotent anyway, so a changed file is simply imported again."""
    from supervisor.prompt_import import import_file

    path = config.path(config.job.prompts)
    try:
        st = path.stat()
    except FileNotFoundError:
        if store.counts().total:
            log.warning("prompts file %s is gone; continuing with the %d prompts imported",
                        path, store.counts().total)
            return
        raise JobError(f"job.prompts: {path}: no such file, and no prompts imported yet") from None
    fingerprint = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}:{config.job.partition}"
    if store.get_setting(SETTING_IMPORTED) == fingerprint:
        return
    summary = import_file(store, path, partition=config.job.partition)
    log.info("imported %s: %s", path, summary)
    if not store.counts().total:
        raise JobError(f"job.prompts: {path}: no usable prompts ({summary})")
    store.set_setting(SETTING_IMPORTED, fingerprint)


class Job:
    def __init__(self, config: JobConfig, *, fleet_options: FleetOptions | None = None,
                 exit_when_paused: bool = False,
                 on_status: Callable[[JobStatus], None] | None = None,
                 status_interval_s: float = 1.0, gpu_source: Any = None,
                 handle_signals: bool = True) -> None:
        self.config = config
        self.fleet_options = fleet_options
        self.exit_when_paused = exit_when_paused
        self.on_status = on_status
        self.status_interval_s = status_interval_s
        self.gpu_source = gpu_source
        self.handle_signals = handle_signals
        self.notifier = Notifier()
        self.dispatcher: Dispatcher | None = None
        self.fleet: Fleet | None = None
        self.gpu: Any = None
        self.uploader: Any = None
        self.disk_guard: Any = None
        self._started = time.time()
        self._reason = "stopped"
        self._last_status: JobStatus | None = None
        self.node_state: Any = None

    # -- setup --------------------------------------------------------------------------------

    def _open_store(self) -> Store:
        path = self.config.path(self.config.job.state)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._prepare_node_state()
        store = Store.open(path)
        try:
            recovered = store.recover_in_flight()
            if recovered:
                log.info("%d prompts were in flight when the last daemon stopped: pending again",
                         recovered)
                store.add_event("recovered_in_flight", "job", {"count": recovered},
                                "supervisor", time.time())
            _import_prompts(store, self.config)
            if self.node_state is not None:
                self.node_state.after_open(store)
        except BaseException:
            store.close()
            raise
        return store

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

    def _gpu_sampler(self) -> Any:
        from supervisor.gpu import GpuSampler, NvmlSource
        return GpuSampler(self.gpu_source if self.gpu_source is not None else NvmlSource())

    # -- run ----------------------------------------------------------------------------------

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

    async def run(self) -> JobResult:
        bound = await anyio.to_thread.run_sync(self._bind_control)
        try:
            store = await anyio.to_thread.run_sync(self._open_store)
        except BaseException:
            bound.close()
            raise
        astore = AsyncStore(store)
        try:
            return await self._run(store, astore, bound)
        finally:
            with anyio.CancelScope(shield=True):
                bound.close()
                await anyio.to_thread.run_sync(store.close)
                self.notifier.send(status="stopped")
                self.notifier.close()

    async def _run(self, store: Store, astore: AsyncStore, bound: BoundSocket) -> JobResult:
        from supervisor.control.server import ControlServer

        from supervisor.shard_writer import ShardWriter

        cfg = self.config
        spool = spool_dir(cfg)
        spool.mkdir(parents=True, exist_ok=True)
        writer = ShardWriter(store, spool, cfg.job.shard_size, shard_key_for(cfg.job.partition))
        shard_limiter = anyio.CapacityLimiter(1)
        dispatcher = self.dispatcher = Dispatcher(astore, cfg)
        self.gpu = self._gpu_sampler()
        self._setup_uploads(astore, spool)
        backup = self.node_state.runner(dispatcher) if self.node_state is not None else None
        if getattr(self.disk_guard, "check", None) is not None:
            # A first verdict before any server is up: never start dispatching onto a full disk.
            await anyio.to_thread.run_sync(self.disk_guard.check)
        async with dispatcher.running():
            fleet = self.fleet = Fleet(cfg, astore, dispatcher, self.fleet_options)
            await astore.call(Store.add_event, "job_started", "job",
                              {"pid": os.getpid(), "servers": len(fleet.servers)},
                              "supervisor", time.time())
            async with anyio.create_task_group() as tg:
                tg.start_soon(fleet.run, name="fleet")
                control = ControlServer(self, astore, bound, cfg.control.interval_s,
                                        lambda points, events: self._control_status(
                                            astore, points, events))
                tg.start_soon(control.run, name="control socket")
                tg.start_soon(self.gpu.run, name="gpu telemetry")
                tg.start_soon(self._shard_loop, writer, shard_limiter, name="shards")
                if self.uploader is not None:
                    tg.start_soon(self.uploader.run, name="uploads")
                if backup is not None:
                    tg.start_soon(backup.run, name="state backup")
                if getattr(self.disk_guard, "run", None) is not None:
                    # Samples free space in a thread; paused_reason() only reads the verdict.
                    tg.start_soon(self.disk_guard.run, name="disk guard")
                if self.handle_signals:
                    tg.start_soon(self._signals, tg.cancel_scope, name="signals")
                await self._watch(astore, fleet)
                tg.cancel_scope.cancel()
            # Everything that could produce an outcome has stopped; commit the rest.
            await dispatcher.flush()
        status = await self._status(astore)
        # The last, partial shard is only cut when the job is complete: before that the
        # remainder keeps filling up to shard_size, so shards are whole except the last.
        await anyio.to_thread.run_sync(writer.sync, status.finished, limiter=shard_limiter)
        if status.finished and self.uploader is not None:
            await self._drain_uploads()
        status = await self._status(astore)
        await astore.call(Store.add_event, "job_stopped", "job",
                          {"reason": self._reason, "done": status.done, "failed": status.failed,
                           "pending": status.pending}, "supervisor", time.time())
        if backup is not None:
            # Last, so the copy holds every outcome, the final shards' uploads and the stop.
            await backup.backup_now()
        return JobResult(status, self._reason)

    def _setup_uploads(self, astore: AsyncStore, spool: Path) -> None:
        """The uploader and disk guard, where the uploads package provides them."""
        try:
            from supervisor.uploads.wiring import build_uploads
        except ImportError:
            return
        self.uploader, self.disk_guard = build_uploads(self.config, astore, spool)

    async def _drain_uploads(self) -> None:
        drain = getattr(self.uploader, "drain", None)
        if drain is not None:
            await drain()

    async def _shard_loop(self, writer: Any, limiter: anyio.CapacityLimiter) -> None:
        # Off the event loop: writing and fsyncing 500 completions takes real time.
        while True:
            await anyio.sleep(1.0)
            written = await anyio.to_thread.run_sync(writer.sync, False, limiter=limiter)
            if written and self.uploader is not None:
                poke = getattr(self.uploader, "poke", None)
                if poke is not None:
                    poke()

    async def _signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self._reason = f"stopped by {signal.Signals(signum).name}"
                log.warning("%s: stopping servers and saving state", self._reason)
                self.notifier.send(stopping=1, status=self._reason)
                scope.cancel()
                return

    async def _status(self, astore: AsyncStore) -> JobStatus:
        counts = await astore.call(Store.counts)
        assert self.dispatcher is not None
        now = time.time()
        status = JobStatus(
            time=now, elapsed_s=now - self._started, total=counts.total, done=counts.done,
            pending=counts.pending, in_flight=counts.in_flight, failed=counts.failed,
            dispatch=self.dispatcher.snapshot(),
            servers=tuple(self.fleet.snapshot()) if self.fleet is not None else (),
            gpu=self.gpu.latest if self.gpu is not None else None,
            uploads=self.uploader.status() if self.uploader is not None else None,
            disk_paused=self.disk_guard.paused_reason() if self.disk_guard is not None else None)
        self._last_status = status
        return status

    async def _control_status(self, astore: AsyncStore, throughput: tuple[Any, ...],
                              events: tuple[Any, ...]) -> Status:
        from supervisor.control.snapshot import build_status

        js = await self._status(astore)
        assert self.dispatcher is not None
        d = self.dispatcher
        return build_status(js, self.config, started_at=self._started,
                            histogram=d.lengths.histogram(d.max_tokens), flags=self.fleet,
                            throughput=throughput, events=events)

    @property
    def last_status(self) -> JobStatus | None:
        return self._last_status

    async def _watch(self, astore: AsyncStore, fleet: Fleet) -> None:
        """Until the job is finished (or paused, when asked to stop then)."""
        assert self.dispatcher is not None
        ready_sent = False
        watchdog = self.notifier.watchdog_interval_s()
        last_ping = 0.0
        while True:
            await self._apply_disk_guard()
            status = await self._status(astore)
            if not ready_sent:
                # Ready = the daemon is up and supervising; servers loading their model for
                # minutes is progress shown in STATUS=, not a failed start.
                self.notifier.send(ready=1)
                ready_sent = True
            if self.on_status is not None:
                self.on_status(status)
            self.notifier.send(status=progress_line(status))
            now = time.monotonic()
            if watchdog is not None and now - last_ping >= watchdog:
                # Pinged from the supervision loop itself: a wedged loop stops the pings.
                self.notifier.send(watchdog=1)
                last_ping = now
            if status.finished:
                self._reason = "finished"
                return
            if self.exit_when_paused:
                snap = self.dispatcher.snapshot()
                if snap.paused and snap.in_flight == 0:
                    self._reason = "paused: " + "; ".join(snap.paused.values())
                    return
                if status.servers and all(str(s.state) == "FAILED" for s in status.servers):
                    self._reason = "every server FAILED: " + "; ".join(
                        f"{s.name}: {s.state_reason}" for s in status.servers)
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
