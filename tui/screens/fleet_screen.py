"""The fleet screen: every node of a many-node job, one row each, the job's total, and the
node under the cursor in detail (goodput, waste by cause, lowered in-flight limits and why).
Enter opens a node's own main screen; Escape there comes back here."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from supervisor.client.fleet_totals import FleetTotals, NodeRow
from tui.widgets.fleet.fleet_table import FleetTable
from tui.widgets.fleet.fleet_totals_line import FleetTotalsLine
from tui.widgets.fleet.node_detail import NodeDetail


class FleetScreen(Screen[None]):
    BINDINGS = [Binding("q", "app.quit", "quit", tooltip="quit; the daemons keep running")]

    nodes: reactive[tuple[NodeRow, ...]] = reactive(())

    def __init__(self, readonly: bool = False) -> None:
        super().__init__()
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        mode = "  read-only" if self.readonly else ""
        yield Static(f" dflash-supervisor fleet{mode}", id="fleet-title")
        yield FleetTotalsLine()
        yield FleetTable()
        yield NodeDetail()
        yield Footer()

    def watch_nodes(self, nodes: tuple[NodeRow, ...]) -> None:
        if not self.is_mounted:
            return
        table = self.query_one(FleetTable)
        table.nodes = nodes
        self.query_one(FleetTotalsLine).totals = FleetTotals.of(list(nodes))
        self._show(table.cursor_row)

    def _show(self, index: int) -> None:
        self.query_one(NodeDetail).node = self.nodes[index] \
            if 0 <= index < len(self.nodes) else None

    def on_mount(self) -> None:
        self.watch_nodes(self.nodes)

    @on(DataTable.RowHighlighted)
    def follow_cursor(self, event: DataTable.RowHighlighted) -> None:
        self._show(event.cursor_row)

    @on(FleetTable.NodeSelected)
    def open_node(self, event: FleetTable.NodeSelected) -> None:
        # On the app's loop, so the node screen binds to the app's data, not this screen's.
        self.app.call_later(self.app.open_node, event.index)  # type: ignore[attr-defined]
