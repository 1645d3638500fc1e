"""A draining server still answers the requests it holds: its "up" runs on through the drain
(the TUI's `up` column showed "—" for the whole of a rolling restart's drain). Real daemon,
simulated server, the real control socket."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.contract.status import ServerState
from tests.fixtures import control_daemon as daemon

pytestmark = pytest.mark.slow


def test_uptime_runs_on_while_a_server_drains(tmp_path: Path) -> None:
    directory = tmp_path / "job"
    directory.mkdir()
    data = daemon.config_dict(directory, servers=1)
    # Long answers (up to ~15 s each at 250 tok/s): the drain lasts seconds, not a blink.
    data["generation"]["max_tokens"] = 3800
    socket = data["control"].get("socket") or str(directory / "control.sock")
    d = daemon.Daemon(daemon.spawn(directory, data), directory, socket, directory / "daemon.log")
    try:
        daemon._wait_answering(d)
        serving = d.wait_status(lambda s: s.servers[0].state is ServerState.READY
                                and s.servers[0].in_flight > 0, "gpu0 READY and busy", 60)
        up_before = serving.servers[0].uptime_s
        assert up_before is not None
        with d.client() as client:
            client.restart("gpu0")
        draining = d.wait_status(lambda s: s.servers[0].state is ServerState.DRAINING,
                                 "gpu0 DRAINING", 30)
        up = draining.servers[0].uptime_s
        assert up is not None and up >= up_before, (up_before, up)
        stopped = d.wait_status(lambda s: s.servers[0].state in (
            ServerState.STOPPING, ServerState.STOPPED, ServerState.STARTING), "gpu0 stopping", 60)
        assert stopped.servers[0].uptime_s is None
    finally:
        assert d.stop() == 0, d.log()[-3000:]
