"""The tuning screen's keys against the stand-in daemon: T opens it from the main screen, s
starts a search with the space and canary typed in its dialog, x stops one after a confirm,
a refusal shows as any action's does, and --readonly shows the screen but sends nothing."""

from __future__ import annotations

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, Input

from supervisor.contract.status import Status
from supervisor.contract.tuning import FlagRange, TuneStartRequest, TuneStopRequest
from tests.fixtures import tui_status_data as data
from tests.fixtures.fake_daemon_client import FakeDaemon
from tests.fixtures.tui_pilot import until_called
from tests.fixtures.waiting import until
from tui.app import DflashTui, make_app
from tui.dialogs.confirm_dialog import ConfirmDialog
from tui.dialogs.tune_start_dialog import TuneStartDialog
from tui.screens.help_screen import HelpScreen
from tui.screens.main_screen import MainScreen
from tui.screens.tuning_screen import TuningScreen
from tui.widgets.tuning.trial_table import TrialTable
from tui.widgets.tuning.tuning_summary import TuningSummary

SIZE = (100, 30)


async def tuning_screen(pilot: Pilot) -> TuningScreen:
    """Until the first snapshot reached the main screen, then T (bounded)."""
    def main_has_status() -> bool:
        screen = pilot.app.screen
        return isinstance(screen, MainScreen) and screen.status is not None
    await until(main_has_status, "the first status on the main screen", timeout_s=2.0,
                poll_s=0.02, pause=pilot.pause)
    await pilot.press("T")
    screen = pilot.app.screen
    assert isinstance(screen, TuningScreen)
    await until(lambda: screen.status is not None, "the status on the tuning screen",
                timeout_s=2.0, poll_s=0.02, pause=pilot.pause)
    return screen


async def notice(pilot: Pilot, app: DflashTui, text: str) -> str:
    def found() -> str | None:
        return next((n.message for n in app._notifications if text in n.message), None)
    return await until(found, f"a notification with {text!r}", timeout_s=2.0, poll_s=0.02,
                       pause=pilot.pause,
                       seen=lambda: str([n.message for n in app._notifications]))


async def dialog_says(pilot: Pilot, text: str) -> None:
    dialog = pilot.app.screen
    await until(lambda: text in str(dialog.query_one("#error").render()),
                f"the dialog saying {text!r}", timeout_s=2.0, poll_s=0.02, pause=pilot.pause)


def offered(app: DflashTui) -> set[str]:
    return {b.binding.action for b in app.active_bindings.values()}


def text_of(screen: TuningScreen) -> str:
    return "\n".join(str(w.render()) for w in (screen.query_one(TuningSummary),
                                               screen.query_one(TrialTable)))


async def test_screen_shows_the_search_and_its_trials() -> None:
    app = make_app(FakeDaemon(data.tuning()))
    async with app.run_test(size=SIZE) as pilot:
        screen = await tuning_screen(pilot)
        shown = text_of(screen)
        assert "TRIAL" in shown and "canary gpu2" in shown and "trial 4/8" in shown
        assert "+41.3%" in shown and "mem-fraction-static=0.88" in shown
        assert "max-running-requests 48→64" in shown and "failed" in shown
        assert "2,930" in shown and "±2.0%" in shown and "measuring" in shown
        # A search under way: stop is offered, start is not.
        assert "tune_stop" in offered(app) and "tune_start" not in offered(app)
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_start_sends_the_typed_space_and_canary() -> None:
    d = FakeDaemon(data.healthy())
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        screen = await tuning_screen(pilot)
        assert "no tuner" in text_of(screen)
        assert "tune_start" in offered(app) and "tune_stop" not in offered(app)
        await pilot.press("s")
        dialog = app.screen
        assert isinstance(dialog, TuneStartDialog)
        dialog.query_one("#space", Input).value = "max-running-requests=32,48 --mem-fraction-static=0.9,0.93"
        dialog.query_one("#server", Input).value = "gpu9"       # no such server: said there
        await pilot.click("#ok")
        await dialog_says(pilot, "no server named 'gpu9'")
        assert not [c for c in d.calls if c[0] == "tune-start"]
        dialog.query_one("#server", Input).value = "gpu1"
        dialog.query_one("#force", Checkbox).value = True
        dialog.query_one("#server", Input).focus()
        await pilot.press("enter")
        call = await until_called(pilot, d, "tune-start")
        assert call[1] == TuneStartRequest(
            space=(FlagRange("max-running-requests", (32, 48)),
                   FlagRange("mem-fraction-static", (0.9, 0.93))), server="gpu1", force=True)
        said = await notice(pilot, app, "tuner waiting")
        assert "canary gpu1" in said and "max-running-requests=32,48" in said
        assert isinstance(app.screen, TuningScreen)


async def test_start_with_an_empty_form_asks_for_the_default_space() -> None:
    d = FakeDaemon(data.healthy())
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await tuning_screen(pilot)
        await pilot.press("s")
        await pilot.press("enter")
        assert (await until_called(pilot, d, "tune-start"))[1] == TuneStartRequest()
        assert "the default space" in await notice(pilot, app, "tuner waiting")


@pytest.mark.parametrize("typed,error", [
    ("max-running-requests", "expected FLAG=V1,V2"),
    ("max-running-requests=32,,64", "an empty value"),
    ("a=1,2 a=3", "a: given twice"),
])
async def test_a_bad_space_is_said_in_the_dialog(typed: str, error: str) -> None:
    d = FakeDaemon(data.healthy())
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await tuning_screen(pilot)
        await pilot.press("s")
        app.screen.query_one("#space", Input).value = typed
        await pilot.press("enter")
        await dialog_says(pilot, error)
        await pilot.press("escape")
        assert isinstance(app.screen, TuningScreen)
        assert d.calls == [c for c in d.calls if c[0] != "tune-start"]


async def test_stop_after_confirm() -> None:
    d = FakeDaemon(data.tuning())
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await tuning_screen(pilot)
        await pilot.press("x")
        assert isinstance(app.screen, ConfirmDialog)
        assert "trial on gpu2" in app.screen.question
        await pilot.press("y")
        assert (await until_called(pilot, d, "tune-stop"))[1] == TuneStopRequest()
        said = await notice(pilot, app, "tuner stopped")
        assert "(was trial) after 3 trials" in said and "max-running-requests=48" in said


async def test_refusal_is_shown() -> None:
    d = FakeDaemon(data.healthy(), refuse={"tune-start": "no server named 'gpu1'"})
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await tuning_screen(pilot)
        await pilot.press("s", "enter")
        await until_called(pilot, d, "tune-start")
        assert (await notice(pilot, app, "refused:")) == "refused: no server named 'gpu1'"


@pytest.mark.parametrize("sample", [data.healthy, data.tuning], ids=["idle", "searching"])
async def test_readonly_sees_the_screen_and_sends_nothing(sample: object) -> None:
    status: Status = sample()  # type: ignore[operator]
    d = FakeDaemon(status)
    app = make_app(d, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = await tuning_screen(pilot)
        assert "(read-only)" in str(screen.query_one("#tuning-title").render())
        await pilot.press("s", "x", "y", "enter")
        await pilot.pause()
        assert app.screen is screen
        assert d.calls == []
        assert not offered(app) & {"tune_start", "tune_stop"}


async def test_help_lists_the_tuning_key() -> None:
    app = make_app(FakeDaemon(data.healthy()))
    async with app.run_test(size=SIZE) as pilot:
        await tuning_screen(pilot)
        await pilot.press("escape", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "the tuner: its search and trials" in str(
            app.screen.query_one(".dialog-text").render())
