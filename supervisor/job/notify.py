"""systemd's notify protocol: READY=1, STATUS=..., WATCHDOG=1, STOPPING=1.

The protocol is one datagram to the socket named in $NOTIFY_SOCKET; a dependency for that
would be heavier than the ten lines it replaces. Outside systemd (no $NOTIFY_SOCKET) every
call is a no-op, so the daemon runs the same from a shell.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        addr = address if address is not None else os.environ.get("NOTIFY_SOCKET", "")
        # "@name" is an abstract socket; Linux spells that with a leading NUL byte.
        self._addr = "\0" + addr[1:] if addr.startswith("@") else addr
        self._sock: socket.socket | None = None
        if self._addr:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, **fields: str | int) -> bool:
        if self._sock is None:
            return False
        msg = "\n".join(f"{k.upper()}={v}" for k, v in fields.items()).encode()
        try:
            self._sock.sendto(msg, self._addr)
            return True
        except OSError:
            # systemd going away must never take the job with it.
            return False

    def watchdog_interval_s(self) -> float | None:
        """Half of WATCHDOG_USEC when systemd asked for pings (and they are meant for us)."""
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        if not usec or (pid and pid != str(os.getpid())):
            return None
        try:
            return int(usec) / 2e6
        except ValueError:
            return None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
