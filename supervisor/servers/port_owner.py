"""Who holds a server's port: is it free before we launch, and is the process answering on it
the one we launched?

A port already taken by another program (a server from another job, a leftover SGLang, any
program that answers SGLang's API) would make our server die with "address already in use"
while the probe gets 200 from the other program, and every answer from a foreign model would
be written as ours. So the port is checked free before each launch (the holder named by pid
and command line), and READY needs the listening socket to belong to a process in our
server's process group (each server runs in its own group; SGLang's HTTP front end is the
leader or one of its children). Blocking (reads /proc): call from a worker thread.
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class PortHolder:
    port: int
    pid: int | None        # None: the socket belongs to a process we may not inspect
    cmdline: str

    def describe(self) -> str:
        if self.pid is None:
            return f"port {self.port} is in use by a process this user cannot see"
        return f"port {self.port} is in use by pid {self.pid} ({self.cmdline})"


def port_in_use(host: str, port: int) -> bool:
    """Whether binding (host, port) fails with "address in use" (as the server's would).
    SO_REUSEADDR like servers set it: a port in TIME_WAIT after our last server is free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def listener_pids(port: int) -> list[int | None]:
    """Pids with a TCP socket listening on `port` (None where the kernel hides the owner)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return [None]
    return [c.pid for c in conns
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())[:200] or "?"
    except psutil.Error:
        return "?"


def port_holder(host: str, port: int) -> PortHolder | None:
    """Who holds the port, or None when it is free."""
    if not port_in_use(host, port):
        return None
    pids = [p for p in listener_pids(port) if p is not None]
    if not pids:
        return PortHolder(port, None, "")
    return PortHolder(port, pids[0], _cmdline(pids[0]))


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def served_by_group(port: int, pgid: int) -> bool:
    """Whether a process of process group `pgid` listens on `port`."""
    return any(pid is not None and _pgid(pid) == pgid for pid in listener_pids(port))


def foreign_listener(port: int, pgid: int) -> PortHolder | None:
    """A listener on `port` outside process group `pgid`, if any."""
    for pid in listener_pids(port):
        if pid is None:
            return PortHolder(port, None, "")
        if _pgid(pid) != pgid:
            return PortHolder(port, pid, _cmdline(pid))
    return None
