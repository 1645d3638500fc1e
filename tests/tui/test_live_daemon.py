"""dflash-tui attached to a real daemon (simulated servers, the real control socket): each
key's effect reaches the daemon and comes back on the screen; the app reconnects by itself
after the daemon restarts; and it never makes a blocking call on its event loop."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from textual.pilot import Pilot
from textual.widgets import Input, RadioButton

from supervisor.contract.status import ServerState, Status
from tests.fixtures import control_daemon as daemon
from tests.fixtures import waiting
from tui.app import DflashTui, make_app
from tui.client_protocol import connect
from tui.screens.main_screen import MainScreen
from tui.status_feed import FeedTiming
from tui.widgets.activity.event_list import EventList
from tui.widgets.job.job_progress import JobProgress

pytestmark = pytest.mark.slow


async def live_status(d: daemon.Daemon) -> Status:
    """What the daemon says now, asked the way a script would (the sync client), off the
    app's loop."""
    def ask() -> Status:
        with d.client() as c:
            return c.status()
    return await anyio.to_thread.run_sync(ask)

SIZE = (100, 30)
QUICK = FeedTiming(retry_initial_s=0.1, retry_max_s=0.5)


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[daemon.Daemon]:
    running = daemon.start(tmp_path_factory.mktemp("tui") / "job")
    yield running
    assert running.stop() == 0, running.log()[-3000:]


async def until(pilot: Pilot, check: Callable[[], object], what: str,
                timeout_s: float = 20.0) -> None:
    # The pilot's pause, not a bare sleep: the app handles its messages between two checks.
    await waiting.until(check, what, timeout_s, pause=pilot.pause)


def shown(app: DflashTui, widget: type) -> str:
    return str(app.screen.query_one(widget).render())


def notices(app: DflashTui) -> list[str]:
    return [n.message for n in app._notifications]


async def attached(pilot: Pilot) -> None:
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, MainScreen)
                and app.screen.status is not None and app.link.connected, "the first status")


async def test_max_tokens_and_requeue_reach_the_daemon_and_the_screen(d: daemon.Daemon) -> None:
    app = make_app(connect(d.socket), timing=QUICK)
    async with app.run_test(size=SIZE) as pilot:
        await attached(pilot)
        old = app.status.max_tokens
        await pilot.press("m")
        app.screen.query_one("#value", Input).value = str(old + 256)
        app.screen.query_one("#leave", RadioButton).value = True
        await pilot.press("enter")
        await until(pilot, lambda: app.status.max_tokens == old + 256, "the new max tokens")
        assert f"max tokens {old + 256:,}" in shown(app, JobProgress)
        assert any(f"max tokens {old:,} → {old + 256:,}" in m for m in notices(app))
        await until(pilot, lambda: f"max tokens {old} → {old + 256}" in shown(app, EventList),
                    "the max_tokens event on screen")
        assert (await live_status(d)).max_tokens == old + 256
        # Completions cut off at the old limit can now be requeued; the dialog says how many.
        await until(pilot, lambda: (app.status.job.requeueable_truncated or 0) > 0,
                    "truncated prompts under the old limit")
        await pilot.press("u")
        question = app.screen.question  # type: ignore[attr-defined]
        assert "prompts cut off under a lower limit" in question
        await pilot.press("y")
        # The daemon's answer comes back through the socket and a worker: seconds on a
        # busy machine, so a wider wait than the screen's own updates.
        await until(pilot, lambda: any("truncated prompts back to pending" in m
                                       for m in notices(app)), "the requeue answer",
                    timeout_s=60)
        answer = next(m for m in notices(app) if "back to pending" in m)
        count = int(answer.split()[0].replace(",", ""))
        rows = d.query("SELECT json_extract(detail, '$.count') FROM events "
                       "WHERE kind = 'requeue_truncated' ORDER BY id DESC LIMIT 1")
        assert rows[0][0] == count > 0


async def test_pause_resume_and_restart_reach_the_daemon(d: daemon.Daemon) -> None:
    app = make_app(connect(d.socket), timing=QUICK)
    async with app.run_test(size=SIZE) as pilot:
        await attached(pilot)
        await pilot.press("p")
        app.screen.query_one("#reason", Input).value = "checking the shards"
        await pilot.press("enter")
        await until(pilot, lambda: any(a.text == "PAUSED (operator): checking the shards"
                                       for a in app.screen.alerts), "the pause banner")
        assert (await live_status(d)).paused_by("operator") == "checking the shards"
        await pilot.press("p", "y")
        await until(pilot, lambda: not app.screen.alerts, "the banner gone after resume")
        assert any(m.startswith("resumed") for m in notices(app))
        # Restart the second server from its row.
        before = app.status.server("gpu1").restarts
        await pilot.press("down", "r", "y")
        await until(pilot, lambda: app.status.server("gpu1").restarts > before
                    and app.status.server("gpu1").state is ServerState.READY,
                    "gpu1 restarted and READY again", timeout_s=40)
        await until(pilot, lambda: "gpu1 READY → DRAINING" in shown(app, EventList),
                    "the restart in the events")
        rows = d.query("SELECT actor FROM events WHERE kind = 'server_state' AND subject = "
                       "'gpu1' AND json_extract(detail, '$.to') = 'DRAINING' ORDER BY id DESC")
        # The audit trail names this process (the TUI) as the one who asked.
        assert rows and f"pid {os.getpid()}" in rows[0][0]


async def test_reconnects_after_the_daemon_restarts(tmp_path: Path) -> None:
    first = await anyio.to_thread.run_sync(
        lambda: daemon.start(tmp_path / "job", servers=1, ready=False))
    app = make_app(connect(first.socket), timing=QUICK)
    second = None
    try:
        async with app.run_test(size=SIZE) as pilot:
            await attached(pilot)
            pid = app.status.daemon_pid
            await anyio.to_thread.run_sync(first.stop)
            await until(pilot, lambda: any(a.text.startswith("DISCONNECTED")
                                           for a in app.screen.alerts), "the banner")
            second = await anyio.to_thread.run_sync(
                lambda: daemon.start(tmp_path / "job", servers=1, ready=False))
            await until(pilot, lambda: app.link.connected and app.status.daemon_pid != pid,
                        "the new daemon's status", timeout_s=30)
            await until(pilot, lambda: not app.screen.alerts, "the banner gone")
    finally:
        await anyio.to_thread.run_sync(first.stop)
        if second is not None:
            assert await anyio.to_thread.run_sync(second.stop) == 0


async def test_no_blocking_call_on_the_event_loop(d: daemon.Daemon) -> None:
    """Every screen the app has, with the stream running; tests/conftest.py's blockbuster
    fails this (as every async test) on a blocking call from `tui` on the loop."""
    app = make_app(connect(d.socket), timing=QUICK)
    async with app.run_test(size=SIZE) as pilot:
        await attached(pilot)
        await pilot.press("enter")                  # the log screen fetches in a worker
        await until(pilot, lambda: len(app.screen.query_one("#log").lines) > 0,
                    "the log")
        await pilot.press("escape", "question_mark", "escape")
        await pilot.pause(1.0)                      # a few snapshots from the stream
