"""Who is on the other end of a control connection: the kernel's word (SO_PEERCRED), not
the client's. Read once per connection and handed to the app in the ASGI scope's state."""

from __future__ import annotations

import asyncio
import pwd
import socket
import struct
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from supervisor.control.contract import Caller

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


class PeerCredProtocol(H11Protocol):
    """uvicorn's h11 protocol, plus the peer's credentials in every request's scope state.
    (h11, the pure-Python parser: garbage and oversized headers end in a 400 it writes.)"""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        caller = caller_of(transport.get_extra_info("socket"))
        # uvicorn copies app_state into each request's scope["state"].
        self.app_state: dict[str, Any] = {**self.app_state, PEER_KEY: caller}
        super().connection_made(transport)
