"""The read-only metrics listener (`control.metrics_listen`): `GET /metrics` over TCP for a
cluster's Prometheus, which cannot scrape a Unix socket.

It answers only `GET`/`HEAD /metrics`, by handing exactly that request to the control app
(so the text is the socket's, byte for byte); every other path is 404 and every other method
405 before the control app sees it, so no action is reachable from the network.

A slow or hostile client costs the job nothing but its own refusal; the limits and why:
- a connection may send at most MAX_HEAD_BYTES (a scrape's head is ~200 bytes, and no
  request here has a body); past it, 431 and closed (h11's own limit is set too: garbage
  that is not HTTP gets 400 and closed).
- uvicorn answers 503 past MAX_CONNECTIONS open connections instead of queueing: one or two
  Prometheus servers scrape a node, so a flood is refused, not served.
- uvicorn has no deadline for a request head that never ends (slowloris) nor for an idle
  connection before its first request: each connection here is closed CONNECTION_DEADLINE_S
  after it opened, whatever it did; a scrape takes milliseconds and every answer says
  `connection: close`, so no honest scrape is ever cut.
- it runs in the job's task group on its event loop, like the socket: rendering costs the
  same as the socket's /metrics.

The port is bound before the job starts, so a port already taken stops the start with one
line naming its holder, as for the servers' ports.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket

import anyio
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from supervisor.config.listen_address import KEY, ListenAddress, parse_listen
from supervisor.control.job_server import JobServer
from supervisor.servers.port_owner import port_holder

log = logging.getLogger("supervisor.control")
_QUIET = logging.getLogger("supervisor.control.metrics_http")
_QUIET.setLevel(logging.ERROR)

PATH = "/metrics"
MAX_HEAD_BYTES = 16 * 1024
MAX_CONNECTIONS = 32
CONNECTION_DEADLINE_S = 15.0


# Every request this listener takes is a bodiless GET: a connection sending more than a
# head's worth is refused whole.
_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n"
              b"connection: close\r\n\r\n")


class MetricsListenError(RuntimeError):
    """The listener cannot bind its address; the message says which and why."""


def bind(text: str, backlog: int = 64) -> socket.socket:
    """A listening, non-blocking TCP socket on `control.metrics_listen`."""
    address = parse_listen(text)
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As servers set it: our own last listener's port in TIME_WAIT is free to take.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((address.host, address.port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise MetricsListenError(f"{KEY}: {_holder(address.host, address.port)}; "
                                     f"choose another port") from None
        raise MetricsListenError(f"{KEY}: cannot listen on {address}: {exc.strerror}") from None
    return sock


def _holder(host: str, port: int) -> str:
    holder = port_holder(host, port)
    # One line even when the holder's command line has newlines in it (python -c '...').
    if holder is None:
        return f"port {port} was taken while starting"
    return " ".join(holder.describe().split())


def metrics_only(app: ASGIApp) -> ASGIApp:
    """`app` reached with `GET`/`HEAD /metrics` only; everything else refused here."""

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if path != PATH:
            await _refuse(send, 404, f"no such path: {path[:200]}; only GET {PATH} here")
        elif method not in ("GET", "HEAD"):
            await _refuse(send, 405, f"{method[:20]} is not allowed; only GET {PATH} here",
                          [(b"allow", b"GET, HEAD")])
        else:
            # Only the method, path and headers reach the app: the query string and any
            # body stay here.
            inner = {**scope, "query_string": b"", "raw_path": PATH.encode()}
            await app(inner, _no_body, _closing(send))

    return asgi


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


def _closing(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
            message = {**message, "headers": [*headers, (b"connection", b"close")]}
        await send(message)
    return wrapped


async def _refuse(send: Send, status: int, reason: str,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = (reason + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


class _DeadlineProtocol(H11Protocol):
    """h11 with every connection closed CONNECTION_DEADLINE_S after it opened, and refused
    past MAX_HEAD_BYTES received: h11's own limit holds only for a head still incomplete
    after a read, and one loopback read brings 64 KiB."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # The port faces the cluster's network: a scanner's every bad request would be a
        # warning in the journal. Only errors (the app failing) are logged from here.
        self.logger = _QUIET
        super().connection_made(transport)
        self._received = 0
        self._deadline = self.loop.call_later(CONNECTION_DEADLINE_S, transport.close)

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        if self._received > MAX_HEAD_BYTES:
            if not self.transport.is_closing():
                self.transport.write(_TOO_LARGE)
                self.transport.close()
            return
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline.cancel()
        super().connection_lost(exc)


class MetricsListener:
    def __init__(self, sock: socket.socket, control_app: ASGIApp) -> None:
        self.sock = sock
        self.server = JobServer(uvicorn.Config(
            metrics_only(control_app), http=_DeadlineProtocol, ws="none", lifespan="off",
            log_config=None, access_log=False, limit_concurrency=MAX_CONNECTIONS,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES, timeout_keep_alive=2,
            timeout_graceful_shutdown=1, server_header=False))

    async def run(self) -> None:
        """Until cancelled; the socket is closed on the way out."""
        host, port = self.sock.getsockname()[:2]
        log.info("metrics listener: http://%s/metrics", ListenAddress(host, port))
        try:
            await self.server.serve(sockets=[self.sock])
        finally:
            with anyio.CancelScope(shield=True):
                await self.server.stop([self.sock], 2)
            self.sock.close()
