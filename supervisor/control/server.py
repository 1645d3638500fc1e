"""The control server: uvicorn serving the control app on the job's Unix socket, inside the
job's task group, for as long as the job runs.

The socket is bound before the job starts (`socket_file.bind`), so a second daemon on the
same path stops at once with a clear message, and it is served here once the dispatcher and
the fleet exist. uvicorn runs on the job's event loop; its own signal handling is switched
off because the job owns SIGTERM/SIGINT (a stop must drain servers, not just close sockets).
"""

from __future__ import annotations

import logging
import socket

import anyio
import uvicorn

from state.async_store import AsyncStore
from supervisor.control.actions import Actions, JobParts
from supervisor.control.app import build_app
from supervisor.control.hub import Hub, StatusSource
from supervisor.control.job_server import JobServer
from supervisor.control.metrics import RestartCauses
from supervisor.control.metrics_listener import MetricsListener
from supervisor.control.peer import PeerCredProtocol
from supervisor.control.socket_file import BoundSocket

log = logging.getLogger("supervisor.control")
# uvicorn's own INFO lines ("Started server process", "Shutting down") say nothing an operator
# needs; its warnings (bad requests) and errors stay.
logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

# Connections and requests at once; past it uvicorn answers 503 instead of queueing, so a
# flood of clients costs the job nothing but refusals.
MAX_CONCURRENCY = 256


class ControlServer:
    def __init__(self, job: JobParts, astore: AsyncStore, bound: BoundSocket, interval_s: float,
                 status: StatusSource, metrics_sock: socket.socket | None = None) -> None:
        """`status()` builds the job's contract Status (the job supplies it); `metrics_sock`,
        bound from control.metrics_listen, serves the app's /metrics alone over TCP."""
        self.job = job
        self.metrics_sock = metrics_sock
        self.astore = astore
        self.bound = bound
        self.causes = RestartCauses()
        self.hub = Hub(astore, status, interval_s, on_event=self.causes.observe)

    async def run(self) -> None:
        """Until cancelled; the socket file is removed on the way out."""
        try:
            await self.hub.prime()
            async with anyio.create_task_group() as tg:
                actions = Actions(self.job, self.astore, tg)
                app = build_app(self.hub, actions, self.causes)
                config = uvicorn.Config(
                    app, http=PeerCredProtocol, ws="none", lifespan="off", log_config=None,
                    access_log=False, limit_concurrency=MAX_CONCURRENCY, timeout_keep_alive=5,
                    timeout_graceful_shutdown=2, server_header=False)
                server = JobServer(config)
                tg.start_soon(self.hub.run, name="control hub")
                if self.metrics_sock is not None:
                    tg.start_soon(MetricsListener(self.metrics_sock, app).run,
                                  name="metrics listener")
                log.info("control socket: %s", self.bound.path)
                try:
                    await server.serve(sockets=[self.bound.sock])
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.hub.farewell()  # how this daemon ended, to its readers
                        self.hub.close()           # open event streams end now
                        await server.stop([self.bound.sock], 3)
                tg.cancel_scope.cancel()
        finally:
            # Removing the file is a stat and an unlink: off the loop, even while cancelled.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.bound.close)
