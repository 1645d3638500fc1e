"""Each key does what it says, against a stand-in daemon with fixed contract data: the right
request goes out, the answer (or the refusal) is shown, and --readonly sends nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, Input, RadioButton

from supervisor.contract import actions as a
from tests.fixtures import tui_status_data as data
from tests.fixtures.fake_daemon_client import FakeDaemon
from tests.fixtures.tui_pilot import until_called
from tui.app import DflashTui, make_app
from tui.dialogs.confirm_dialog import ConfirmDialog
from tui.screens.help_screen import HelpScreen
from tui.screens.main_screen import MainScreen
from tui.screens.server_log_screen import ServerLogScreen
from tui.status_feed import FeedTiming

SIZE = (100, 30)


def fake(status=data.healthy, **kw: object) -> FakeDaemon:
    return FakeDaemon(status(), **kw)  # type: ignore[arg-type]


async def ready(pilot: Pilot) -> None:
    """Until the first snapshot is on the main screen (bounded)."""
    for _ in range(100):
        await pilot.pause(0.02)
        if isinstance(pilot.app.screen, MainScreen) and pilot.app.screen.status is not None:
            return
    raise AssertionError("the first status never reached the main screen")


def notices(app: DflashTui) -> list[str]:
    return [n.message for n in app._notifications]


async def test_max_tokens_dialog_sends_value_and_requeue() -> None:
    d = fake()
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("m")
        field = app.screen.query_one("#value", Input)
        assert field.value == "8192"          # the current 4096, doubled
        field.value = "6000"
        await pilot.press("enter")
        call = await until_called(pilot, d, "max-tokens")
        assert call[1] == a.MaxTokensRequest(6000, requeue_truncated=True, requeue_at_most=29_977)
        await pilot.pause(0.05)
        assert any("4,096 → 6,000" in m and "29,977" in m for m in notices(app))


async def test_max_tokens_without_requeue_and_bad_value() -> None:
    d = fake()
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("m")
        app.screen.query_one("#value", Input).value = "-3"
        await pilot.press("enter")
        await pilot.pause(0.05)
        assert "not a whole number" in str(app.screen.query_one("#error").render())
        assert not [c for c in d.calls if c[0] == "max-tokens"]
        app.screen.query_one("#value", Input).value = "5000"
        app.screen.query_one("#leave", RadioButton).value = True
        await pilot.press("enter")
        assert (await until_called(pilot, d, "max-tokens"))[1] == a.MaxTokensRequest(5000)


async def test_escape_cancels_without_a_request() -> None:
    d = fake()
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        for key in ("m", "p", "R", "u", "r", "t"):
            await pilot.press(key)
            await pilot.pause(0.02)
            assert not isinstance(app.screen, MainScreen), key
            await pilot.press("escape")
            await pilot.pause(0.02)
            assert isinstance(app.screen, MainScreen), key
        assert d.calls == []


async def test_restart_selected_server_after_confirm() -> None:
    d = fake()
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("down", "down", "r")
        assert isinstance(app.screen, ConfirmDialog)
        assert "gpu2" in app.screen.question
        await pilot.press("y")
        assert (await until_called(pilot, d, "restart"))[1] == a.RestartRequest("gpu2")
        await pilot.pause(0.05)
        assert any("restarting gpu2" in m for m in notices(app))


async def test_rolling_restart_and_requeue() -> None:
    d = fake()
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("R", "y")
        assert (await until_called(pilot, d, "restart"))[1] == a.RestartRequest(None)
        await pilot.press("u")
        assert isinstance(app.screen, ConfirmDialog) and "412 prompts" in app.screen.question
        await pilot.press("y")
        sent = (await until_called(pilot, d, "requeue-truncated"))[1]
        assert sent == a.RequeueTruncatedRequest(include_loops=False)
        await pilot.pause(0.05)
        assert any("412 truncated prompts back to pending" in m for m in notices(app))


async def test_requeue_with_loops_says_what_it_includes() -> None:
    d = fake(data.with_insight)
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("U")
        assert isinstance(app.screen, ConfirmDialog)
        assert "looping included (9,114 caught looping so far)" in app.screen.question
        await pilot.press("y")
        sent = (await until_called(pilot, d, "requeue-truncated"))[1]
        assert sent == a.RequeueTruncatedRequest(include_loops=True)


async def test_requeue_with_nothing_to_requeue_says_so_without_a_dialog() -> None:
    s = data.healthy()
    d = FakeDaemon(replace(s, job=replace(s.job, requeueable_truncated=0)))
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("u")
        await pilot.pause(0.05)
        assert isinstance(app.screen, MainScreen)
        assert any("Nothing to requeue" in m and "4,096" in m for m in notices(app))
        assert not [c for c in d.calls if c[0] == "requeue-truncated"]


async def test_pause_then_resume_with_one_key() -> None:
    d = fake()
    app = make_app(d, timing=FeedTiming(poll_interval_s=0.05))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("p")
        app.screen.query_one("#reason", Input).value = "checking shard 42"
        await pilot.press("enter")
        assert (await until_called(pilot, d, "pause"))[1] == a.PauseRequest("checking shard 42")
        # The fake now reports the pause; the screen learns it from the next snapshot.
        app.status = d.status_now
        await pilot.pause(0.05)
        assert "PAUSED (operator): checking shard 42" in [a.text for a in app.screen.alerts]
        await pilot.press("p")
        assert isinstance(app.screen, ConfirmDialog) and "checking shard 42" in app.screen.question
        await pilot.press("y")
        await until_called(pilot, d, "resume")
        await pilot.pause(0.05)
        assert "resumed (lifted operator: checking shard 42)" in notices(app)


async def test_retune_parses_flags_for_all_or_one() -> None:
    d = fake()
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("t")
        field = app.screen.query_one("#flags", Input)
        field.value = "max-running-requests"          # no '=': refused in the dialog
        await pilot.press("enter")
        await pilot.pause(0.05)
        assert "expected name=value" in str(app.screen.query_one("#error").render())
        field.value = "--max-running-requests=48 mem-fraction-static=0.88"
        await pilot.press("enter")
        call = await until_called(pilot, d, "retune")
        assert call[1] == a.RetuneRequest((a.FlagSetting("max-running-requests", 48),
                                          a.FlagSetting("mem-fraction-static", 0.88)))
        await pilot.press("down", "t")
        app.screen.query_one("#flags", Input).value = "cuda-graph-max-bs=160"
        app.screen.query_one("#only", Checkbox).value = True
        app.screen.query_one("#add", Checkbox).value = True
        await pilot.press("enter")
        for _ in range(100):
            await pilot.pause(0.02)
            if len([c for c in d.calls if c[0] == "retune"]) == 2:
                break
        only = a.RetuneRequest((a.FlagSetting("cuda-graph-max-bs", 160),), "gpu1", add=True)
        assert d.calls[-1] == ("retune", only)


async def test_reset_only_on_a_failed_server() -> None:
    d = fake(data.with_failed_server)
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("f")                    # gpu0 is READY: the key is not offered
        await pilot.pause(0.05)
        assert isinstance(app.screen, MainScreen)
        await pilot.press(*["down"] * 5, "f")
        assert isinstance(app.screen, ConfirmDialog) and "gpu5" in app.screen.question
        await pilot.press("y")
        assert (await until_called(pilot, d, "reset"))[1] == a.ResetRequest("gpu5")


async def test_refusal_is_shown() -> None:
    d = fake(refuse={"max-tokens": "max_tokens 40000 is not below the servers' "
                                       "context length (32768)"})
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("m")
        app.screen.query_one("#value", Input).value = "40000"
        await pilot.press("enter")
        await until_called(pilot, d, "max-tokens")
        await pilot.pause(0.05)
        assert any(m.startswith("refused: max_tokens 40000 is not below") for m in notices(app))


async def test_log_screen_and_back() -> None:
    d = fake(log_lines=("first line", "oom: CUDA out of memory"))
    app = make_app(d)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("down", "down", "down", "enter")
        assert isinstance(app.screen, ServerLogScreen) and app.screen.server == "gpu3"
        assert (await until_called(pilot, d, "log"))[1].server == "gpu3"
        await pilot.pause(0.05)
        assert "oom: CUDA out of memory" in app.screen.query_one("#log").lines
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


@pytest.mark.parametrize("key", ["m", "u", "U", "p", "R", "r", "t", "f"])
async def test_readonly_sends_nothing(key: str) -> None:
    d = fake(data.with_failed_server)
    app = make_app(d, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press(*["down"] * 5, key, "y")
        await pilot.pause(0.05)
        assert isinstance(app.screen, MainScreen)
        assert d.calls == []
        shown = {b.binding.action for b in app.active_bindings.values()}
        assert not shown & {"max_tokens", "requeue", "requeue_with_loops", "pause", "resume",
                            "restart_all", "restart", "reset", "retune"}


async def test_help_lists_every_key() -> None:
    app = make_app(fake())
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one(".dialog-text").render())
        for words in ("restart the selected server", "set max tokens", "requeue prompts",
                      "answers caught looping included",
                      "pause dispatch", "resume dispatch", "rolling restart", "FAILED",
                      "SGLang flags", "log", "quit"):
            assert words in text, words
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
