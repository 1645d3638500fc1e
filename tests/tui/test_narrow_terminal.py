"""80x24 is a first-class terminal: the server table chooses its columns by width and never
loses a row, the exit reason and the uptime stay whole; the help fits without wrapping.
Pictures at 80x24 and at 120x40 of the same data (update with --snapshot-update, and look)."""

from __future__ import annotations

import pytest
from textual.app import App

from tests.fixtures.fake_daemon_client import FakeDaemon
from tests.fixtures.tui_pilot import STILL, app_with, settled
from tests.tui import narrow_data
from tui.app import make_app
from tui.screens.help_screen import HelpScreen
from tui.widgets.servers.server_table import ServerTable

SMALL, LARGE = (80, 24), (120, 40)


def screen_lines(app: App[None]) -> list[str]:
    """The screen as text, one string per row, as a terminal would show it."""
    return ["".join(seg.text for seg in strip).rstrip()
            for strip in app.screen._compositor.render_strips()]


def table_rows(app: App[None]) -> list[str]:
    table = app.screen.query_one(ServerTable)
    top = table.region.y
    return screen_lines(app)[top: top + table.region.height]


def test_demo_fleet_80x24(snap_compare) -> None:
    """demo --tui at 80x24: no GPU figures, so their n/a columns give way; SGLang's column,
    the uptime (gpu1 DRAINING still counts it) and the whole OOM reason stay."""
    assert snap_compare(app_with(narrow_data.demo_fleet), terminal_size=SMALL,
                        run_before=settled)


def test_demo_fleet_120x40(snap_compare) -> None:
    """The same at 120x40: every column."""
    assert snap_compare(app_with(narrow_data.demo_fleet), terminal_size=LARGE,
                        run_before=settled)


def test_failed_server_80x24(snap_compare) -> None:
    """Eight GPUs with figures at 80x24: utilisation and temperature give way first; the
    FAILED row, its restarts and the start of both exit reasons stay."""
    assert snap_compare(app_with(narrow_data.node_with_failure), terminal_size=SMALL,
                        run_before=settled)


def test_failed_server_120x40(snap_compare) -> None:
    """The same at 120x40: every column, the exit reasons whole."""
    assert snap_compare(app_with(narrow_data.node_with_failure), terminal_size=LARGE,
                        run_before=settled)


def test_help_80x24(snap_compare) -> None:
    """The help at 80x24: one line per key, the note on the audit trail, nothing wrapped."""
    assert snap_compare(app_with(), terminal_size=SMALL, press=["question_mark"],
                        run_before=settled)


def test_help_under_the_demo_120x40(snap_compare) -> None:
    """Under `demo --tui` the help says that quitting ends the demo."""
    app = make_app(FakeDaemon(narrow_data.demo_fleet()), timing=STILL, demo=True)
    assert snap_compare(app, terminal_size=LARGE, press=["question_mark"], run_before=settled)


def test_confirm_dialog_80x24(snap_compare) -> None:
    """A confirm dialog at 80x24: its action button has the focus (Enter does it)."""
    assert snap_compare(app_with(), terminal_size=SMALL, press=["R"], run_before=settled)


@pytest.mark.parametrize("status", [narrow_data.demo_fleet, narrow_data.node_with_failure])
@pytest.mark.parametrize("size", [SMALL, (100, 30), LARGE])
async def test_every_row_and_the_columns_that_matter_stay(status, size) -> None:
    s = status()
    app = app_with(status)
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        rows = table_rows(app)
        assert all(len(line) <= size[0] for line in rows)
        header = rows[0]
        for heading in ("server", "state", "in fl", "up", "last exit"):
            assert heading in header, (heading, header)
        for srv in s.servers:
            [row] = [r for r in rows if r.split()[:1] == [srv.name]]
            assert srv.state.value in row
            if srv.uptime_s is not None and srv.uptime_s >= 60:
                assert "m" in row.split(srv.state.value)[1], row     # 3m07s, never cut to 3m
            if srv.last_exit_reason:
                assert srv.last_exit_reason[:16] in row, row
        assert len([r for r in rows[1:] if r.strip()]) == len(s.servers)


async def test_a_draining_server_shows_its_uptime() -> None:
    app = app_with(narrow_data.demo_fleet)
    async with app.run_test(size=SMALL) as pilot:
        await settled(pilot)
        [row] = [r for r in table_rows(app) if r.startswith(" gpu1")]
        assert "DRAINING" in row and "3m11s" in row, row


async def test_the_columns_follow_a_resize() -> None:
    app = app_with(narrow_data.node_with_failure)
    async with app.run_test(size=LARGE) as pilot:
        await settled(pilot)
        assert "util" in table_rows(app)[0]
        await pilot.resize_terminal(*SMALL)
        await settled(pilot)
        assert "util" not in table_rows(app)[0] and "last exit" in table_rows(app)[0]
        await pilot.resize_terminal(*LARGE)
        await settled(pilot)
        assert "util" in table_rows(app)[0]


@pytest.mark.parametrize("demo", [False, True])
@pytest.mark.parametrize("readonly", [False, True])
async def test_the_help_fits_80x24_unwrapped_and_tells_the_truth(demo: bool,
                                                                  readonly: bool) -> None:
    app = make_app(FakeDaemon(narrow_data.demo_fleet()), timing=STILL, demo=demo,
                   readonly=readonly)
    async with app.run_test(size=SMALL) as pilot:
        await settled(pilot)
        await pilot.press("question_mark")
        await settled(pilot)
        assert isinstance(app.screen, HelpScreen)
        shown = "\n".join(screen_lines(app))
        text = app.screen.query_one(".dialog-text").render()
        for line in str(text).splitlines():
            # Each line of the help is on the screen whole: none wrapped, none cut.
            assert line.strip() in shown, line
        assert "…" not in shown
        # The columns too short to read alone are explained.
        for column in ("in fl", "sgl run/q", "kv", "stopped"):
            assert f" {column} " in shown, column
        if demo:
            assert "end the demo" in shown and "keeps running" not in shown
        else:
            assert "the daemon keeps running" in shown
