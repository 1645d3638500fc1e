"""The feed from the daemon: reconnects with backoff, resumes the event stream after the last
event it saw, and falls back to polling a daemon that has no stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import pytest

from supervisor.client.control_client import ControlRefused, ControlUnreachable
from supervisor.contract.status import Event, Gap, Status, StreamItem
from tests.fixtures import tui_status_data as data
from tests.fixtures.fake_daemon_client import FakeDaemon
from tui.link_state import LinkState
from tui.status_feed import FeedTiming, follow

FAST = FeedTiming(retry_initial_s=0.01, retry_max_s=0.04, poll_interval_s=0.01)


@dataclass
class Recorder:
    statuses: list[Status] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    links: list[LinkState] = field(default_factory=list)


async def run_until(daemon: object, done, timing: FeedTiming = FAST) -> Recorder:
    rec = Recorder()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                while not done(rec):
                    await anyio.sleep(0.005)
                tg.cancel_scope.cancel()
            tg.start_soon(watch)
            await follow(daemon, on_status=rec.statuses.append,  # type: ignore[arg-type]
                         on_event=rec.events.append, on_link=rec.links.append, timing=timing)
    return rec


@dataclass
class Flaky(FakeDaemon):
    """Unreachable for the first `fail` connections, then one scripted stream per
    connection: each but the last breaks after its items (a daemon restart)."""
    fail: int = 3
    script: list[list[StreamItem]] = field(default_factory=list)
    sinces: list[int | None] = field(default_factory=list)

    async def events(self, since: int | None = None, *,
                     idle_timeout_s: float = 60.0) -> AsyncIterator[StreamItem]:
        self.sinces.append(since)
        if self.fail:
            self.fail -= 1
            raise ControlUnreachable(self.socket, "Connection refused")
        for item in self.script.pop(0):
            yield item
        if not self.script:
            await anyio.sleep_forever()
        raise ControlUnreachable(self.socket, "the daemon closed the connection")


async def test_retries_until_the_daemon_answers_then_reports_live() -> None:
    status = data.healthy()
    daemon = Flaky(status, fail=3, script=[[status]])
    rec = await run_until(daemon, lambda r: len(r.statuses) == 1 and r.links[-1].connected)
    down = [link for link in rec.links if not link.connected]
    assert [link.attempts for link in down] == [1, 2, 3]
    assert all("Connection refused" in link.reason for link in down)
    # One down_since for the whole outage, not one per attempt.
    assert len({link.since for link in down}) == 1
    assert rec.statuses == [status]
    assert not any(link.ever_connected for link in down) and rec.links[-1].ever_connected


async def test_a_restarted_stream_resumes_after_the_last_event() -> None:
    status = data.healthy()
    e1, e2, e3 = data.EVENTS[:3]
    daemon = Flaky(status, fail=0, script=[[status, e1, e2], [Gap(dropped=4), e3, status]])
    rec = await run_until(daemon, lambda r: len(r.statuses) == 2)
    assert daemon.sinces[:2] == [None, e2.id]
    assert rec.events == [e1, e2, e3]
    assert [link.connected for link in rec.links] == [True, False, True]
    assert rec.links[1].ever_connected      # "disconnected", not "waiting"


@dataclass
class NoStream(FakeDaemon):
    async def events(self, since: int | None = None, *,
                     idle_timeout_s: float = 60.0) -> AsyncIterator[StreamItem]:
        raise ControlRefused(404, "no such path: /v1/events")
        yield  # pragma: no cover - makes this an async generator


async def test_polls_a_daemon_without_an_event_stream() -> None:
    daemon = NoStream(data.healthy())
    rec = await run_until(daemon, lambda r: len(r.statuses) >= 3)
    assert [c for c in daemon.calls if c[0] != "status"] == []
    assert rec.links and all(link.connected and not link.streaming for link in rec.links)


async def test_a_refusal_other_than_404_is_a_retry_not_a_crash() -> None:
    @dataclass
    class Denied(FakeDaemon):
        async def events(self, since: int | None = None, *,
                         idle_timeout_s: float = 60.0) -> AsyncIterator[StreamItem]:
            raise ControlRefused(403, "permission denied")
            yield  # pragma: no cover

    rec = await run_until(Denied(data.healthy()), lambda r: len(r.links) >= 2)
    assert all(not link.connected and "permission denied" in link.reason for link in rec.links)


@pytest.mark.parametrize("attempts", [1, 5, 50])
async def test_backoff_is_bounded(attempts: int) -> None:
    daemon = Flaky(data.healthy(), fail=attempts, script=[[data.healthy()]])
    timing = FeedTiming(retry_initial_s=0.001, retry_max_s=0.002)
    rec = await run_until(daemon, lambda r: bool(r.statuses), timing)
    assert max(link.attempts for link in rec.links) == attempts
