"""The tuning screen on a real daemon (simulated servers, the real control socket): s starts
a search whose state streams back onto the screen, x stops it, and the daemon's audit trail
has both. Runs once the daemon has its tuner (supervisor/tune)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, Input

from supervisor.contract.tuning import TuneState
from tests.fixtures import control_daemon as daemon
from tests.fixtures import waiting
from tui.app import DflashTui, make_app
from tui.client_protocol import connect
from tui.screens.main_screen import MainScreen
from tui.screens.tuning_screen import TuningScreen
from tui.status_feed import FeedTiming
from tui.widgets.tuning.tuning_summary import TuningSummary

pytest.importorskip("supervisor.tune.tuner", reason="the daemon's tuner is not in this tree")
pytestmark = pytest.mark.slow
QUICK = FeedTiming(retry_initial_s=0.1, retry_max_s=0.5)


async def until(pilot: Pilot, check: Callable[[], object], what: str) -> None:
    await waiting.until(check, what, 30.0, pause=pilot.pause)


def summary(app: DflashTui) -> str:
    return str(app.screen.query_one(TuningSummary).render())


def state(app: DflashTui) -> TuneState | None:
    s = app.status
    return s.tuning.state if s is not None and s.tuning is not None else None


async def test_start_and_stop_from_the_tuning_screen(tmp_path: Path) -> None:
    d = await anyio.to_thread.run_sync(lambda: daemon.start(tmp_path / "job"))
    try:
        app = make_app(connect(d.socket), timing=QUICK)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, MainScreen)
                        and app.screen.status is not None, "the first status")
            await pilot.press("T")
            assert isinstance(app.screen, TuningScreen)
            await pilot.press("s")
            app.screen.query_one("#space", Input).value = "max-running-requests=8,12"
            app.screen.query_one("#server", Input).value = "gpu1"
            app.screen.query_one("#force", Checkbox).value = True
            await pilot.press("enter")
            await until(pilot, lambda: any("tuner " in n.message and "canary gpu1" in n.message
                                           for n in app._notifications), "the start's answer")
            await until(pilot, lambda: "canary gpu1" in summary(app)
                        and state(app) not in (None, TuneState.OFF), "the search on screen")
            await pilot.press("x", "y")
            await until(pilot, lambda: any(n.message.startswith("tuner stopped")
                                           for n in app._notifications), "the stop's answer")
            await until(pilot, lambda: state(app) is TuneState.OFF and "stopped by" in
                        summary(app), "the stopped search on screen")
        rows = d.query("SELECT subject FROM events WHERE kind = 'control_action' "
                       "AND subject LIKE 'tune-%' ORDER BY id")
        assert [r[0] for r in rows] == ["tune-start", "tune-stop"]
    finally:
        await anyio.to_thread.run_sync(d.stop)
