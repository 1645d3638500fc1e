"""Keys behave alike in every dialog: Enter does what the dialog offers (its default action),
Escape cancels and sends nothing. Against a stand-in daemon with fixed contract data."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from supervisor.contract import actions as a
from tests.fixtures import tui_status_data as data
from tests.fixtures.fake_daemon_client import FakeDaemon
from tests.fixtures.tui_pilot import until_called
from tests.tui.test_keys import ready
from tui.app import make_app
from tui.screens.main_screen import MainScreen

SIZE = (100, 30)

# (status, keys that open the dialog, the entry Enter sends, its request record)
DIALOGS = {
    "restart": (data.healthy, ["down", "r"], "restart", a.RestartRequest("gpu1")),
    "restart all": (data.healthy, ["R"], "restart", a.RestartRequest(None)),
    "requeue": (data.healthy, ["u"], "requeue-truncated",
                a.RequeueTruncatedRequest(False)),
    "requeue with loops": (data.with_insight, ["U"], "requeue-truncated",
                           a.RequeueTruncatedRequest(True)),
    "resume": (data.paused_by_quality, ["p"], "resume", a.ResumeRequest()),
    "reset": (data.with_failed_server, ["down"] * 5 + ["f"], "reset", a.ResetRequest("gpu5")),
    "pause": (data.healthy, ["p"], "pause", a.PauseRequest("paused by operator")),
    # The requeue is bounded by the count the dialog showed (the snapshot's job.truncated).
    "max tokens": (data.healthy, ["m"], "max-tokens",
                   a.MaxTokensRequest(8192, True, requeue_at_most=data.healthy().job.truncated)),
    "max tokens, continue": (data.continuable, ["m"], "max-tokens",
                             a.MaxTokensRequest(8192, continue_truncated=True)),
}


@pytest.mark.parametrize("name", list(DIALOGS))
async def test_enter_does_the_dialogs_action(name: str) -> None:
    status, keys, call, args = DIALOGS[name]
    d = FakeDaemon(status())
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press(*keys)
        await pilot.pause(0.02)
        assert not isinstance(app.screen, MainScreen), name
        await pilot.press("enter")
        assert (await until_called(pilot, d, call))[1] == args
        assert isinstance(app.screen, MainScreen)


async def test_enter_retunes_with_the_typed_flags() -> None:
    d = FakeDaemon(data.healthy())
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("t")
        app.screen.query_one("#flags", Input).value = "max-running-requests=48"
        await pilot.press("enter")
        assert (await until_called(pilot, d, "retune"))[1].flags == (
            a.FlagSetting("max-running-requests", 48),)


@pytest.mark.parametrize("name", list(DIALOGS))
async def test_escape_cancels_and_sends_nothing(name: str) -> None:
    status, keys, _call, _args = DIALOGS[name]
    d = FakeDaemon(status())
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press(*keys)
        await pilot.pause(0.02)
        assert not isinstance(app.screen, MainScreen), name
        await pilot.press("escape")
        await pilot.pause(0.05)
        assert isinstance(app.screen, MainScreen), name
        assert d.calls == []
