"""The fleet screen (`dflash-tui --socket A --socket B ...`) from fixed contract data: a row
per node with what to see about it, the job's total with the slowest node's ETA, Enter into
a node's own screen (its keys act on that node only) and Escape back."""

from __future__ import annotations

from textual.widgets import Input

from tests.fixtures import tui_status_data as data
from tests.fixtures.fake_daemon_client import FakeDaemon
from tests.fixtures.tui_pilot import STILL, WIDE, node, settled, until_called
from tui.fleet_app import make_fleet_app
from tui.screens.fleet_screen import FleetScreen
from tui.screens.main_screen import MainScreen
from tui.widgets.servers.server_table import ServerTable


def three_nodes() -> list[FakeDaemon]:
    return [FakeDaemon(node(data.healthy(), "0/3", 120_000, 40_000.0), socket="/tmp/n0.sock"),
            FakeDaemon(node(data.paused_by_quality(), "1/3", 90_000, 61_000.0),
                       socket="/tmp/n1.sock"),
            FakeDaemon(None, socket="/tmp/n2.sock", down="connection refused")]


def test_fleet_screen_three_nodes(snap_compare) -> None:
    """Three nodes: one running, one paused by the quality gate, one unreachable; the job line
    says the ETA is unknown because a node does not answer."""
    app = make_fleet_app(three_nodes(), timing=STILL)   # type: ignore[arg-type]
    assert snap_compare(app, terminal_size=WIDE, run_before=settled)


async def test_enter_opens_the_node_and_its_keys_act_on_it_alone() -> None:
    daemons = three_nodes()
    app = make_fleet_app(daemons, timing=STILL)   # type: ignore[arg-type]
    async with app.run_test(size=WIDE) as pilot:
        await settled(pilot)
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("enter")
        await settled(pilot)
        assert isinstance(app.screen, MainScreen) and app.screen.daemon is daemons[0]
        assert len(app.screen.query_one(ServerTable).rows) == 8
        await pilot.press("p")
        app.screen.query_one("#reason", Input).value = "maintenance"
        await pilot.press("enter")
        assert (await until_called(pilot, daemons[0], "pause"))[1] == "maintenance"
        assert not [c for c, _ in daemons[1].calls if c != "status"]
        await pilot.press("escape")
        await settled(pilot)
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("down", "enter")
        await settled(pilot)
        assert isinstance(app.screen, MainScreen) and app.screen.daemon is daemons[1]
        assert app.status is not None and app.status.partition == "1/3"
        assert any("PAUSED (quality)" in a.text for a in app.screen.alerts)
