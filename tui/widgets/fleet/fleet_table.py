"""One row per node of a many-node job: its partition, progress, rate, ETA, servers (with how
many run under an in-flight limit the saturation guard lowered: `8/8 2↓` in orange), upload
backlog, goodput and the one thing to see about it (the tokens wasted, by cause, and each
lowered limit's reason are in the detail under the table, for the row under the cursor).
Enter on a row asks for that node's own screen (`FleetTable.NodeSelected`); the app decides
what that means."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable

from supervisor.client.fleet_totals import NodeRow
from supervisor.client.text import duration
from tui.formatting import one_line
from tui.goodput_style import goodput_cell
from tui.widgets.servers.server_table import OVERCOMMIT_STYLE

COLUMNS = (("node", "node"), ("part", "part"), ("done", "done"), ("pct", "%"),
           ("req_s", "req/s"), ("eta", "ETA"), ("servers", "servers"), ("backlog", "backlog"),
           ("goodput", "goodput"), ("state", "state"))


def state_cell(row: NodeRow) -> Text:
    text = row.state_text()
    if row.status is None or text.startswith(("UPLOADS STOPPED", "FAILED")):
        style = "bold white on red"
    elif text.startswith("PAUSED"):
        style = "bold black on yellow"
    else:
        style = "green" if text in ("running", "finished") else "yellow"
    return Text(one_line(text, 70), style=style)


def short_names(sockets: list[str]) -> list[str]:
    """What tells the nodes' sockets apart: the path components they all share at the start
    and at the end left out (`/run/n3/control.sock` of `/run/n*/control.sock` is `n3`), so
    the row keeps its width for the figures; the detail under the table has the whole path."""
    parts = [p.split("/") for p in sockets]
    if len(parts) < 2:
        return ["/".join(p[-2:]) for p in parts]
    shortest = min(len(p) for p in parts)
    lead = 0
    while lead < shortest - 1 and len({p[lead] for p in parts}) == 1:
        lead += 1
    trail = 0
    while trail < shortest - lead - 1 and len({p[-1 - trail] for p in parts}) == 1:
        trail += 1
    return ["/".join(p[lead:len(p) - trail]) for p in parts]


def row_cells(row: NodeRow, name: str | None = None) -> tuple[str | Text, ...]:
    s = row.status
    name = row.socket if name is None else name
    if s is None:
        return (name, "?", "—", "—", "—", "—", "—", "—", "—", state_cell(row))
    pct = f"{100 * s.job.done / s.job.total:.1f}" if s.job.total else "—"
    eta = "—" if row.remaining == 0 else duration(s.eta.seconds, "?") + (
        "?" if s.eta.warming_up and s.eta.seconds is not None else "")
    backlog = str(s.uploads.backlog_shards) if s.uploads is not None else "—"
    # A node that finished and exited: its counts are final, its rate and servers are gone.
    rate = "—" if row.exited else f"{s.rates.req_per_s:.1f}"
    return (name, row.partition, f"{s.job.done:,}/{s.job.total:,}", pct, rate, eta,
            "—" if row.exited else servers_cell(row), backlog, goodput_cell(row.goodput),
            state_cell(row))


def servers_cell(row: NodeRow) -> Text | str:
    """`7/8` READY of all; `8/8 2↓` in orange while 2 of them run under a lowered limit."""
    ready, servers = row.servers_ready
    if row.limited:
        return Text(f"{ready}/{servers} {len(row.limited)}↓", style=OVERCOMMIT_STYLE)
    return f"{ready}/{servers}"


class FleetTable(DataTable[str | Text]):
    BINDINGS = [Binding("enter", "open_node", "open node", tooltip="this node's own screen")]

    nodes: reactive[tuple[NodeRow, ...]] = reactive(())

    class NodeSelected(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def on_mount(self) -> None:
        self._keys: set[str] = set()
        self.cursor_type = "row"
        for key, heading in COLUMNS:
            self.add_column(heading, key=key)

    def watch_nodes(self, nodes: tuple[NodeRow, ...]) -> None:
        # Rows are keyed by position (the order of --socket), which never changes: cells are
        # updated in place so the cursor stays on the node the operator is looking at.
        names = short_names([n.socket for n in nodes])
        for i, node in enumerate(nodes):
            cells = row_cells(node, names[i])
            key = str(i)
            if key in self._keys:
                for (col, _), value in zip(COLUMNS, cells):
                    self.update_cell(key, col, value)
            else:
                self.add_row(*cells, key=key)
                self._keys.add(key)

    def action_open_node(self) -> None:
        if self.row_count:
            self.post_message(self.NodeSelected(self.cursor_row))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.NodeSelected(event.cursor_row))
