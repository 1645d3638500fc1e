"""One owner of the live settings, seen through the control socket of a real daemon: a
retune of the servers' context length bounds the max tokens an operator may ask for next, and
a retune that would put the context length at or below the live max tokens is refused
before any server restarts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.client.control_client import ControlRefused
from tests.fixtures import control_daemon as daemon

pytestmark = pytest.mark.slow


@pytest.fixture
def d(tmp_path: Path) -> Iterator[daemon.Daemon]:
    running = daemon.start(tmp_path / "job", flags={"context-length": 32768})
    yield running
    assert running.stop() == 0, running.log()[-3000:]


def _context(s, name: str) -> str | None:
    server = next(x for x in s.servers if x.name == name)
    return next((str(f.value) for f in server.flags if f.name == "context-length"), None)


def test_retuned_context_length_bounds_max_tokens(d: daemon.Daemon) -> None:
    with d.client() as client:
        answer = client.retune({"context-length": 16384})
        assert answer.order == ("gpu0", "gpu1")
        s = d.wait_status(lambda s: all(_context(s, n) == "16384" for n in ("gpu0", "gpu1"))
                          and all(x.state.value == "READY" for x in s.servers),
                          "both servers restarted with context-length 16384", 60)
        assert s.context_length == 16384
        # Below the config's 32768, but not below what the servers now run with.
        with pytest.raises(ControlRefused, match=r"context length \(16384\)"):
            client.set_max_tokens(20000)
        assert client.status().max_tokens == 256
        assert client.set_max_tokens(8192).new == 8192
        # And the other way round: the context length may not drop to the live max tokens.
        with pytest.raises(ControlRefused, match=r"live max tokens \(8192\)"):
            client.retune({"context-length": 8192}, server="gpu1")
    assert d.query("SELECT count(*) FROM events WHERE kind = 'max_tokens'")[0][0] == 1
    flags_now = d.wait_status(lambda s: True, "a status")
    assert _context(flags_now, "gpu1") == "16384"
