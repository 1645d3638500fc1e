"""The fleet screen (`dflash-tui --socket A --socket B ...`) from fixed contract data: a row
per node with what to see about it, the job's total with the slowest node's ETA and the job's
goodput, the node under the cursor in detail (waste by cause, lowered in-flight limits and
why), Enter into a node's own screen (its keys act on that node only) and Escape back."""

from __future__ import annotations

from dataclasses import replace

from textual.widgets import Input

from supervisor.contract.status import Status, Waste, WasteCount
from tests.fixtures import tui_status_data as data
from tests.fixtures.fake_daemon_client import FakeDaemon
from tests.fixtures.tui_pilot import NARROW, STILL, WIDE, node, settled, until_called
from tui.fleet_app import make_fleet_app
from tui.screens.fleet_screen import FleetScreen
from tui.screens.main_screen import MainScreen
from tui.widgets.fleet.fleet_table import FleetTable, short_names
from tui.widgets.fleet.fleet_totals_line import FleetTotalsLine
from tui.widgets.fleet.node_detail import NodeDetail
from tui.widgets.servers.server_table import ServerTable


def three_nodes() -> list[FakeDaemon]:
    return [FakeDaemon(node(data.healthy(), "0/3", 120_000, 40_000.0), socket="/tmp/n0.sock"),
            FakeDaemon(node(data.paused_by_quality(), "1/3", 90_000, 61_000.0),
                       socket="/tmp/n1.sock"),
            FakeDaemon(None, socket="/tmp/n2.sock", down="connection refused")]


REASON = "over-committed: retracting 42.0 requests/min over the last 6 polls (over 10/min)"


def ledger(kept: int, loop: int, requeue: int = 0) -> Waste:
    return Waste(kept_tokens=kept, wasted_tokens=loop + requeue,
                 goodput=kept / (kept + loop + requeue),
                 causes=(WasteCount("crash", 0, 0), WasteCount("loop", 900, loop),
                         WasteCount("requeue", 40 if requeue else 0, requeue)))


def lowered(s: Status, limits: dict[str, int]) -> Status:
    return replace(s, servers=tuple(
        replace(x, inflight_limit=limits.get(x.name, x.max_running),
                inflight_limit_reason=REASON if x.name in limits else None)
        for x in s.servers))


def wasteful_nodes() -> list[FakeDaemon]:
    """n0 keeps 92% of its tokens; n1 loops a lot (70%) and the guard holds two of its
    servers back; n2 does not answer."""
    n0 = replace(node(data.healthy(), "0/3", 120_000, 40_000.0),
                 waste=ledger(372_000_000, 24_000_000, 7_000_000))
    n1 = replace(lowered(node(data.healthy(), "1/3", 90_000, 61_000.0),
                         {"gpu3": 48, "gpu6": 40}),
                 waste=ledger(140_000_000, 60_000_000))
    return [FakeDaemon(n0, socket="/tmp/n0.sock"), FakeDaemon(n1, socket="/tmp/n1.sock"),
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
        assert (await until_called(pilot, daemons[0], "pause"))[1].reason == "maintenance"
        assert not [c for c, _ in daemons[1].calls if c != "status"]
        await pilot.press("escape")
        await settled(pilot)
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("down", "enter")
        await settled(pilot)
        assert isinstance(app.screen, MainScreen) and app.screen.daemon is daemons[1]
        assert app.status is not None and app.status.partition == "1/3"
        assert any("PAUSED (quality)" in a.text for a in app.screen.alerts)


def test_fleet_goodput_and_lowered_limits(snap_compare) -> None:
    """Goodput per node (n1's 70% in red) and for the job (85.0%, summed tokens), n1's servers
    `8/8 2↓` in orange, the job line counting 2 lowered limits, n0 in the detail."""
    app = make_fleet_app(wasteful_nodes(), timing=STILL)   # type: ignore[arg-type]
    assert snap_compare(app, terminal_size=WIDE, run_before=settled)


def test_fleet_node_detail_80x24(snap_compare) -> None:
    """At 80x24 the cursor on n1: the detail under the table names gpu3 and gpu6 with the
    guard's reason and n1's waste by cause."""
    async def second_row(pilot) -> None:
        await settled(pilot)
        await pilot.press("down")
        await settled(pilot)
    app = make_fleet_app(wasteful_nodes(), timing=STILL)   # type: ignore[arg-type]
    assert snap_compare(app, terminal_size=NARROW, run_before=second_row)


async def test_the_detail_follows_the_cursor_and_the_totals_sum_tokens() -> None:
    app = make_fleet_app(wasteful_nodes(), timing=STILL)   # type: ignore[arg-type]
    async with app.run_test(size=WIDE) as pilot:
        await settled(pilot)
        screen = app.screen
        totals = screen.query_one(FleetTotalsLine).totals
        assert totals is not None
        # (372M + 140M) / (403M + 200M), not the mean of 92.3% and 70%.
        assert totals.goodput == 512_000_000 / 603_000_000
        assert (totals.limited_servers, totals.servers) == (2, 16)
        lines = str(screen.query_one(FleetTotalsLine).render()).splitlines()
        health = lines[1]
        assert "goodput 84.9% (91.00M tokens wasted)" in health
        assert lines[2] == " in-flight limit lowered on 2 of 16 servers by the saturation guard"
        table = screen.query_one(FleetTable)
        assert [str(table.get_cell(str(i), "goodput")) for i in range(3)] == \
            ["92.3%", "70.0%", "—"]
        assert [str(table.get_cell(str(i), "servers")) for i in range(3)] == \
            ["8/8", "8/8 2↓", "—"]
        detail = screen.query_one(NodeDetail)

        def shown() -> list[str]:
            return [str(x) for x in detail.lines()]
        assert shown()[0].startswith(" /tmp/n0.sock (0/3) running")
        assert shown()[2] == " every server at its full in-flight limit"
        await pilot.press("down")
        await settled(pilot)
        assert shown()[1] == (" goodput 70.0%: 140.0M tokens kept, 60.0M wasted "
                              "(loop 60.0M)")
        assert shown()[2:] == [f" gpu3 in-flight limit 48 of 64: {REASON}",
                               f" gpu6 in-flight limit 40 of 64: {REASON}"]
        await pilot.press("down")
        await settled(pilot)
        assert shown() == [" /tmp/n2.sock UNREACHABLE: no daemon answers on /tmp/n2.sock: "
                           "connection refused"]


def test_rows_name_nodes_by_what_tells_their_sockets_apart() -> None:
    assert short_names(["/run/fleet/node0/control.sock", "/run/fleet/node1/control.sock"]) == \
        ["node0", "node1"]
    assert short_names(["/tmp/n0.sock", "/tmp/n1.sock"]) == ["n0.sock", "n1.sock"]
    assert short_names(["/tmp/n0.sock", "/var/run/d/control.sock"]) == \
        ["tmp/n0.sock", "var/run/d/control.sock"]
    # Nothing in common, or a single socket: the path (or its last two parts) as it is.
    assert short_names(["a.sock", "/b/a.sock"]) == ["a.sock", "/b/a.sock"]
    assert short_names(["/run/x/control.sock"]) == ["x/control.sock"]


def finished(status: Status, part: str) -> Status:
    """A node's last status before its daemon exits: its partition done and uploaded."""
    s = node(status, part, 300_000, 0.0)
    return replace(s, job=replace(s.job, pending=0, in_flight=0),
                   uploads=replace(s.uploads, backlog_shards=0) if s.uploads else None)


async def test_a_node_that_finished_and_exited_stays_counted_and_says_so() -> None:
    # n0 runs; n1 sends its finished status and exits (as `run` does at the end of its
    # partition); n2 sends a status with work left and dies: that one is lost, not finished.
    nodes = [FakeDaemon(node(data.healthy(), "0/3", 120_000, 40_000.0), socket="/tmp/n0.sock"),
             FakeDaemon(finished(data.healthy(), "1/3"), socket="/tmp/n1.sock",
                        dies_after_first="connection refused"),
             FakeDaemon(node(data.healthy(), "2/3", 5_000, 90_000.0), socket="/tmp/n2.sock",
                        dies_after_first="connection refused")]
    app = make_fleet_app(nodes, timing=STILL)   # type: ignore[arg-type]
    async with app.run_test(size=WIDE) as pilot:
        await settled(pilot)
        table = app.screen.query_one(FleetTable)
        states = [str(table.get_cell(str(i), "state")) for i in range(3)]
        assert states[0] == "running" and states[1] == "finished (daemon exited)"
        assert states[2].startswith("UNREACHABLE")
        # Its counts stay; its rate and servers went with the daemon.
        assert [str(table.get_cell("1", c)) for c in ("done", "req_s", "servers")] == \
            ["300,000/300,000", "—", "—"]
        totals = app.screen.query_one(FleetTotalsLine).totals
        assert totals is not None
        # The finished node's 300,000 still count; the lost node's do not.
        assert (totals.done, totals.total) == (420_000, 600_000)
        assert (totals.answering, totals.exited, totals.all_accounted) == (1, 1, False)
        health = str(app.screen.query_one(FleetTotalsLine).render()).splitlines()[1]
        assert health.startswith(" 1/3 nodes answer (1 finished and exited), 2 of 3 partitions")
