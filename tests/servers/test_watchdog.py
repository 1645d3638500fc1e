"""The progress watchdog on its own: a fake dispatcher's counters, no processes."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import anyio

from supervisor.config import JobConfig, ServersSection
from supervisor.config.live_settings import LiveSettings
from supervisor.servers.exit_classifier import Trigger
from supervisor.servers.managed_server import FleetContext, ManagedServer
from supervisor.servers.watchers import Decision, watch_progress
from supervisor.servers.restart_policy import RestartPolicy
from supervisor.servers.server_log import ServerLog

from tests.fixtures.fake_dispatcher import Progress


class Counters:
    def __init__(self, in_flight: int, advancing: bool) -> None:
        self.p = Progress(in_flight=in_flight)
        self.advancing = advancing

    def progress(self, name: str) -> Progress:
        if self.advancing:
            self.p.completed += 1
        return self.p


def _server(tmp_path: Path, dispatcher: object) -> ManagedServer:
    servers = replace(ServersSection(count=1, model_path="m"), hang_timeout_s=0.2,
                      health_interval_s=0.02)

    async def store_call(*args: object) -> None:
        return None

    ctx = FleetContext(store_call=store_call, dispatcher=dispatcher, client=None,  # type: ignore[arg-type]
                       clock=time.time, monotonic=time.monotonic, on_change=lambda: None,
                       proc_limiter=anyio.CapacityLimiter(1))
    return ManagedServer("gpu0", (0,), 30000, LiveSettings(JobConfig(servers=servers)), ctx,
                         ServerLog(tmp_path / "gpu0.log"), RestartPolicy.from_config(servers))


async def test_busy_without_completions_is_a_stall(tmp_path: Path) -> None:
    server = _server(tmp_path, Counters(in_flight=3, advancing=False))
    decision = Decision()
    with anyio.fail_after(10):
        with decision.scope:
            await watch_progress(server._progress, server.servers, decision)
    assert decision.outcome is not None and decision.outcome.trigger is Trigger.PROGRESS
    assert "3 requests in flight" in decision.outcome.detail


async def test_completions_or_idleness_are_not_a_stall(tmp_path: Path) -> None:
    for counters in (Counters(in_flight=3, advancing=True), Counters(in_flight=0, advancing=False)):
        decision = Decision()
        with anyio.move_on_after(1.0):  # five hang timeouts
            with decision.scope:
                server = _server(tmp_path, counters)
                await watch_progress(server._progress, server.servers, decision)
        assert decision.outcome is None
