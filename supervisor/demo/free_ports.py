"""Finding free loopback ports for servers the daemon (or a test) starts itself."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

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
    """`count` consecutive free loopback ports (a demo run again takes its earlier range
    where it can: reusable_base_port)."""
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


def reusable_base_port(config_file: Path, count: int) -> int | None:
    """The servers' base port of the demo run before this one (its demo.toml), when this
    run may take it again: each port free, or held by a server of a dflash job (its
    environment carries a job token: the daemon's adoption then decides whether it is this
    job's). A demo daemon that was killed left its servers loaded on those ports; a new
    range would never find them. None: a fresh range (no earlier run, a different server
    count, or a port some other program took since)."""
    import tomllib

    import psutil

    from supervisor.servers.adoption import TOKEN_ENV
    from supervisor.servers.port_owner import listener_pids, port_in_use

    try:
        servers = tomllib.loads(config_file.read_text(encoding="utf-8")).get("servers", {})
        base, before = int(servers["base_port"]), int(servers["count"])
    except (OSError, ValueError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return None
    if before != count:
        return None
    for port in range(base, base + count):
        if not port_in_use("127.0.0.1", port):
            continue
        for pid in listener_pids(port):
            try:
                if pid is None or TOKEN_ENV not in psutil.Process(pid).environ():
                    return None
            except psutil.Error:
                return None
    return base
