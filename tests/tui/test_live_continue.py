"""dflash-tui's `m` dialog on a real daemon (simulated servers, the real control socket):
continuing the truncated answers is offered first with the daemon's own figures, Enter
continues them, and the rates line then counts the tokens not decoded again."""

from __future__ import annotations

import anyio
import pytest
from textual.widgets import RadioButton

from tests.fixtures import control_daemon as daemon

# `d`: a daemon of this module's own, started as the live-daemon tests start theirs.
from tests.tui.test_live_daemon import QUICK, SIZE, attached, d, notices, shown, until  # noqa: F401
from tui.app import make_app
from tui.client_protocol import connect
from tui.dialogs.max_tokens_dialog import MaxTokensDialog, continue_label
from tui.widgets.job.job_progress import JobProgress

pytestmark = pytest.mark.slow


async def test_m_continues_the_truncated_answers_first(d: daemon.Daemon) -> None:
    # Off the app's loop, as a script would ask (the sync client).
    await anyio.to_thread.run_sync(lambda: d.wait_status(
        lambda s: s.continuation is not None and s.continuation.continuable >= 3,
        "three truncated answers with stored tokens", timeout_s=90))
    app = make_app(connect(d.socket), timing=QUICK)
    async with app.run_test(size=SIZE) as pilot:
        await attached(pilot)
        assert app.status is not None
        old = app.status.max_tokens
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MaxTokensDialog),
                    "the max tokens dialog")
        dialog = app.screen
        assert isinstance(dialog, MaxTokensDialog)
        offered = dialog.continuation
        assert offered is not None and offered.continuable >= 3
        cont = dialog.query_one("#continue", RadioButton)
        assert cont.value and cont.display
        assert str(cont.label) == continue_label(offered)
        await pilot.press("enter")
        await until(pilot, lambda: any("truncated answers to continue" in m
                                       for m in notices(app)), "the daemon's answer")
        answer = next(m for m in notices(app) if "truncated answers to continue" in m)
        assert answer.startswith(f"max tokens {old:,} → {2 * old:,}; ")
        continued = int(answer.split("; ")[1].split()[0].replace(",", ""))
        # What the dialog offered may have grown by the answers truncated since it opened.
        assert continued >= offered.continuable
        await until(pilot, lambda: "continued" in shown(app, JobProgress),
                    "the tokens not decoded again on the rates line", timeout_s=90)
        rows = d.query("SELECT answers, tokens FROM continued_totals")
        assert rows[0][0] > 0 and rows[0][1] >= old * rows[0][0]
