"""Who is on the other end of a control connection: the kernel's word (SO_PEERCRED), not
the client's. Read once per connection and handed to the app in the ASGI scope's state."""

from __future__ import annotations

import asyncio
import pwd
import socket
import struct
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from supervisor.contract.status import Caller

PEER_KEY = "dflash_peer"


def caller_of(sock: socket.socket | None) -> Caller | None:
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, gid = struct.unpack("3i", raw)
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return Caller(uid=uid, user=user, pid=pid, gid=gid)


def actor_of(caller: Caller | None) -> str:
    """The events table's `actor` for an action over the socket."""
    if caller is None:
        return "control (unknown peer)"
    return f"{caller.user} (uid {caller.uid}, pid {caller.pid})"


class PeerCredProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (the C parser: a status poll costs the job's event loop
    about half what h11 costs), plus the peer's credentials in every request's scope state,
    and a limit on header bytes, which httptools does not have."""

    max_header_bytes = 16 * 1024

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        caller = caller_of(transport.get_extra_info("socket"))
        # uvicorn copies app_state into each request's scope["state"].
        self.app_state: dict[str, Any] = {**self.app_state, PEER_KEY: caller}
        self._in_headers = True
        self._header_bytes = self._pending = 0
        super().connection_made(transport)

    def on_message_begin(self) -> None:
        self._in_headers = True
        self._header_bytes = self._pending = 0
        super().on_message_begin()

    def _count(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > self.max_header_bytes:
            # Raised inside a parser callback: httptools turns it into HttpParserError,
            # which uvicorn answers with a 400 and a closed connection.
            raise ValueError("request line and headers too large")

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        if self._in_headers:
            self._pending += len(data)
        super().data_received(data)
        # Headers dripping in without end (one value never finishing): not a client of ours.
        if self._in_headers and self._pending > 4 * self.max_header_bytes \
                and not self.transport.is_closing():
            self.send_400_response("request line and headers too large")
