"""What a job takes hold of before it runs, in this order, each in a worker thread (they
touch files and sockets):

1. the job lock: a second daemon on this job stops here, before it could touch our socket,
   our servers (orphan cleanup) or our shards;
2. the control socket, and the metrics listener when `control.metrics_listen` asks for one:
   a second daemon on this socket stops here, touching nothing;
3. the state DB: a lost node's DB restored first (state backups), the output checked
   against it, and what a killed daemon left in flight noted for the fleet (a server adopted
   from that daemon gets those requests aborted by id).

Each refusal is one JobError line; what was taken before it is let go. `held()` gives the
socket and the store for the job's run and lets everything go after it, the store closed
for readers (checkpointed, out of WAL: group auditors read a stopped job's DB without
write access to its directory, state/connection.py).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio

from state.job_lock import JobLock, JobLocked
from state.records import InFlightClaim
from state.store import Store
from supervisor.config import JobConfig
from supervisor.config.live_settings import LiveSettings
from supervisor.control import metrics_listener, socket_file
from supervisor.job.store_setup import JobError, open_job_store
from supervisor.shards.verify import UnknownOutput, check_output_at_start
from supervisor.state_backup.node_state import NodeState
from supervisor.state_backup.restore import RestoreRefused


class JobStart:
    def __init__(self, live: LiveSettings) -> None:
        self.live = live
        self.node_state: NodeState | None = None            # state backups: a node's
        self.metrics_sock: socket.socket | None = None      # control.metrics_listen's
        self.left_in_flight: list[InFlightClaim] = []       # a killed daemon's requests

    @property
    def config(self) -> JobConfig:
        return self.live.config

    @asynccontextmanager
    async def held(self, on_released: Callable[[], None]) -> AsyncIterator[
            tuple[socket_file.BoundSocket, Store]]:
        """The control socket and the store, held for the run; `on_released` once all of
        it has been let go (not when taking it failed)."""
        job_lock = await anyio.to_thread.run_sync(self.take_lock)
        try:
            bound = await anyio.to_thread.run_sync(self.bind_control)
        except BaseException:
            job_lock.release()
            raise
        try:
            store = await anyio.to_thread.run_sync(self.open_store)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(bound.close)
            self._close_metrics()
            job_lock.release()
            raise
        try:
            yield bound, store
        finally:
            with anyio.CancelScope(shield=True):
                # Off the loop: closing the socket file stats and unlinks it.
                await anyio.to_thread.run_sync(bound.close)
                self._close_metrics()
                await anyio.to_thread.run_sync(store.close_for_readers)
                job_lock.release()
                on_released()

    def _close_metrics(self) -> None:
        if self.metrics_sock is not None:
            self.metrics_sock.close()

    def take_lock(self) -> JobLock:
        path = self.config.path(self.config.job.state)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return JobLock(path).acquire()
        except JobLocked as exc:
            raise JobError(str(exc)) from None
        except OSError as exc:
            raise JobError(f"job.state: {path}: {exc.strerror}") from None

    def bind_control(self) -> socket_file.BoundSocket:
        c = self.config.control
        # A relative control.socket is relative to the config's directory (or --workdir), like
        # every other path in the config: N nodes sharing one config get N sockets.
        configured = str(self.config.path(c.socket)) if c.socket else ""
        path = socket_file.default_socket_path(configured, self.config.path(self.config.job.state))
        try:
            bound = socket_file.bind(path, socket_file.resolve_group(c.group))
        except socket_file.SocketFileError as exc:
            raise JobError(str(exc)) from None
        if c.metrics_listen:
            try:
                self.metrics_sock = metrics_listener.bind(c.metrics_listen)
            except metrics_listener.MetricsListenError as exc:
                bound.close()
                raise JobError(str(exc)) from None
        return bound

    def open_store(self) -> Store:
        return open_job_store(self.config, before_open=self._prepare_node_state,
                              after_open=self._node_state_opened,
                              check_output=self._check_output,
                              left_in_flight=self._keep_left_in_flight)

    def _keep_left_in_flight(self, claims: list[InFlightClaim]) -> None:
        self.left_in_flight = claims

    def _check_output(self, store: Store) -> None:
        try:
            check_output_at_start(store, self.config)
        except UnknownOutput as exc:
            raise JobError(str(exc)) from None

    def _prepare_node_state(self) -> None:
        """State backups (a node of a many-node job): refuse a prompt file the other nodes
        do not share, and restore a lost node's DB before it is opened."""
        try:
            self.node_state = NodeState.prepare(self.live)
            if self.node_state is not None:
                self.node_state.before_open()
        except RestoreRefused as exc:
            raise JobError(str(exc)) from None

    def _node_state_opened(self, store: Store) -> None:
        if self.node_state is not None:
            self.node_state.after_open(store)
