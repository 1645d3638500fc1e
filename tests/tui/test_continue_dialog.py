"""The `m` dialog when the daemon kept the truncated answers' tokens: continuing them is
offered first, with how many and the tokens kept, requeueing from scratch second; the answers
without stored tokens are said; a daemon that cannot continue is offered the requeue alone.
Against a stand-in daemon with fixed contract data."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

from textual.pilot import Pilot
from textual.widgets import RadioButton, Static

from supervisor.contract.actions import MaxTokensRequest
from supervisor.contract.continuation import Continuation
from supervisor.contract.status import Status
from tests.fixtures import tui_status_data as data
from tests.fixtures.fake_daemon_client import FakeDaemon
from tests.fixtures.tui_pilot import NARROW, WIDE, app_with, settled, until_called
from tests.tui.test_keys import notices, ready
from tui.app import make_app
from tui.dialogs.max_tokens_dialog import MaxTokensDialog, continue_label, rerun_note
from tui.event_text import describe
from tui.widgets.job.job_progress import JobProgress


def nothing_to_continue() -> Status:
    s = data.continuable()
    return replace(s, continuation=Continuation(without_ids=s.job.truncated or 0))


def test_continue_offered_first(snap_compare) -> None:
    """m with stored tokens: "Continue 1,733 truncated answers: 7.1M tokens kept" chosen,
    requeue from scratch second, the 214 without stored tokens said under them."""
    assert snap_compare(app_with(data.continuable), terminal_size=WIDE, press=["m"],
                        run_before=settled)


def test_continue_offered_first_at_80_columns(snap_compare) -> None:
    """The same dialog at 80x24: every choice on one line, the buttons in view."""
    assert snap_compare(app_with(data.continuable), terminal_size=NARROW, press=["m"],
                        run_before=settled)


def test_the_rates_line_counts_the_tokens_continuing_saved(snap_compare) -> None:
    """The rates line ends with goodput and "continued 1.3M tok" in green."""
    assert snap_compare(app_with(data.continuable), terminal_size=WIDE, run_before=settled)


def test_the_labels() -> None:
    c = data.continuable().continuation
    assert c is not None
    assert continue_label(c) == "Continue 1,733 truncated answers: 7.1M tokens kept"
    assert rerun_note(c).startswith("214 answers have no stored tokens: re-run from the start")
    assert rerun_note(replace(c, without_ids=0)) == "" == rerun_note(None)
    cells = [str(x) for x in JobProgress._waste_cells(data.continuable())]
    assert cells == ["goodput 98.2%", "lost to requeue 87%", "continued 1.3M tok"]
    pending = replace(data.continuable(), continuation=replace(c, pending=1_733))
    assert [str(x) for x in JobProgress._waste_cells(pending)][-1] == "continuing 1,733"


def test_the_event_line() -> None:
    e = data.event(107, "continue_truncated", "generation",
                   {"continued": 1_733, "from_scratch": 214, "tokens_kept": 7_098_368,
                    "below_max_tokens": 8192, "include_loops": False}, "user:alice")
    assert describe(e) == ("continuing 1733 truncated answers from their tokens (7.10M kept, "
                           "under 8192 tokens); 214 with no stored tokens re-run from the "
                           "start")
    assert describe(replace(e, detail_json='{"continued": 3, "from_scratch": 0}')) == (
        "continuing 3 truncated answers from their tokens (? kept, under ? tokens)")


@asynccontextmanager
async def dialog_open(status: Status) -> AsyncIterator[tuple[Pilot, FakeDaemon, MaxTokensDialog]]:
    """The app on a stand-in daemon serving `status`, with `m` pressed."""
    d = FakeDaemon(status)
    app = make_app(d)
    async with app.run_test(size=WIDE) as pilot:
        await ready(pilot)
        await pilot.press("m")
        await pilot.pause(0.02)
        assert isinstance(app.screen, MaxTokensDialog)
        yield pilot, d, app.screen


async def test_enter_continues_and_the_answer_says_what_was_kept() -> None:
    async with dialog_open(data.continuable()) as (pilot, d, dialog):
        assert dialog.query_one("#continue", RadioButton).value
        await pilot.press("enter")
        assert (await until_called(pilot, d, "max-tokens"))[1] == MaxTokensRequest(
            8192, continue_truncated=True)
        await pilot.pause(0.05)
        assert any("4,096 → 8,192; 1,733 truncated answers to continue (7.1M tokens kept), "
                   "214 with no stored tokens re-run from the start" in m
                   for m in notices(pilot.app))  # type: ignore[arg-type]


async def test_arrows_choose_requeue_from_scratch_and_the_note_follows() -> None:
    async with dialog_open(data.continuable()) as (pilot, d, dialog):
        note = dialog.query_one("#note", Static)
        assert "214 answers have no stored tokens" in str(note.render())
        # Tab from the value to the choices, down to the requeue, space to choose it.
        await pilot.press("tab", "down", "space")
        await pilot.pause(0.02)
        assert dialog.query_one("#requeue", RadioButton).value
        assert "decoded again from its first token" in str(note.render())
        await pilot.press("shift+tab", "enter")
        # Bounded by the count the dialog showed (issue 41: shown = requeued).
        assert (await until_called(pilot, d, "max-tokens"))[1] == MaxTokensRequest(
            8192, requeue_truncated=True, requeue_at_most=data.continuable().job.truncated)


async def test_a_daemon_that_cannot_continue_is_offered_the_requeue() -> None:
    for status in (data.healthy(), nothing_to_continue()):
        async with dialog_open(status) as (pilot, d, dialog):
            cont = dialog.query_one("#continue", RadioButton)
            assert not cont.display and cont.disabled
            assert dialog.query_one("#requeue", RadioButton).value
            # The arrow keys skip the hidden choice: up from the requeue wraps to "leave".
            await pilot.press("tab", "up", "space")
            await pilot.pause(0.02)
            assert dialog.query_one("#leave", RadioButton).value and not cont.value
            await pilot.press("shift+tab", "enter")
            assert (await until_called(pilot, d, "max-tokens"))[1] == MaxTokensRequest(8192)
