"""Finding free loopback ports for servers the daemon (or a test) starts itself."""

from __future__ import annotations

import random
import socket


def free_base_port(count: int, start: int = 31000, stop: int = 60000) -> int:
    """`count` consecutive free loopback ports. A new range per run is fine: the servers of
    a killed run are stopped by their recorded process groups, not found by port."""
    base = start + random.randrange(1000) * 10
    for _ in range(200):
        if base + count >= stop:
            base = start
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            base += count + 7
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free block of loopback ports found")


def free_port() -> int:
    """One free loopback port, chosen by the kernel."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
