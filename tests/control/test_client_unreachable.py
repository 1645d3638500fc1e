"""The client says "unreachable" (not refused, not a traceback) when no daemon answers."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from supervisor.client.control_client import (
    AsyncControlClient,
    ControlClient,
    ControlRefused,
    ControlUnreachable,
)


def test_no_socket_file(tmp_path: Path) -> None:
    path = tmp_path / "control.sock"
    with ControlClient(str(path)) as client:
        with pytest.raises(ControlUnreachable) as info:
            client.status()
    assert str(path) in str(info.value)
    assert "No such file" in info.value.reason
    assert not isinstance(info.value, ControlRefused)


def test_stale_socket_file_nobody_listening(tmp_path: Path) -> None:
    path = tmp_path / "control.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()                      # the file stays, nothing listens: a dead daemon's socket
    with ControlClient(str(path)) as client:
        with pytest.raises(ControlUnreachable, match="refused"):
            client.pause("x")
        with pytest.raises(ControlUnreachable):
            list(client.events())


async def test_async_client_unreachable(tmp_path: Path) -> None:
    async with AsyncControlClient(str(tmp_path / "none.sock")) as client:
        with pytest.raises(ControlUnreachable, match="No such file"):
            await client.status()
        with pytest.raises(ControlUnreachable):
            async for _ in client.events():
                pass
