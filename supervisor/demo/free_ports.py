"""Finding free loopback ports for servers the daemon (or a test) starts itself."""

from __future__ import annotations

import os
import random
import socket

# "START-STOP": where free_base_port looks when not told. A test suite running several
# processes at once gives each a block of its own (tests/fixtures/ports.py), so two of them,
# or a demo each starts, never pick the same port between the check and the server's bind.
PORT_RANGE_ENV = "DFLASH_PORT_RANGE"


def _port_range() -> tuple[int, int]:
    text = os.environ.get(PORT_RANGE_ENV, "")
    if not text:
        return 31000, 60000
    try:
        start, stop = (int(part) for part in text.split("-"))
    except ValueError:
        raise ValueError(f"{PORT_RANGE_ENV}={text!r}: expected START-STOP, e.g. 12000-12999"
                         ) from None
    if not 1024 <= start < stop <= 65535:
        raise ValueError(f"{PORT_RANGE_ENV}={text!r}: expected 1024 <= START < STOP <= 65535")
    return start, stop


def free_base_port(count: int, start: int | None = None, stop: int | None = None) -> int:
    """`count` consecutive free loopback ports. A new range per run is fine: the servers of
    a killed run are stopped by their recorded process groups, not found by port."""
    if start is None or stop is None:
        start, stop = _port_range()
    base = start + random.randrange(max(1, min(1000, (stop - start - count) // 10))) * 10
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
