"""Under the fleet table, the node the cursor is on, in full: its state text (cut short in
the row), its goodput with the tokens thrown away by cause, and each server whose in-flight
limit the saturation guard lowered, with the guard's reason. Enter opens the node's own
screen for everything else."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from supervisor.client.fleet_totals import NodeRow
from supervisor.client.text import waste_line
from tui.formatting import one_line
from tui.goodput_style import goodput_style
from tui.widgets.servers.server_table import OVERCOMMIT_STYLE

# Lowered limits shown one per line; past this many, a count (the node's screen has all).
LIMIT_LINES = 3


class NodeDetail(Widget):
    node: reactive[NodeRow | None] = reactive(None, layout=True)

    def render(self) -> Text:
        # One line each, cut at the edge: the height is the number of lines.
        return Text("\n", no_wrap=True, overflow="ellipsis").join(self.lines())

    def lines(self) -> list[Text]:
        row = self.node
        if row is None:
            return [Text(" no node selected", style="dim")]
        head = Text(f" {row.socket} ", style="bold", no_wrap=True, overflow="ellipsis")
        head.append(f"({row.partition}) " if row.status is not None else "")
        head.append(one_line(row.state_text(), 300), style="" if row.status else "bold red")
        s = row.status
        if s is None:
            return [head]
        out = [head]
        if s.waste is None:
            out.append(Text(" goodput: not reported (a daemon from before the waste ledger)",
                            style="dim"))
        else:
            style = goodput_style(s.waste.goodput) if s.waste.goodput is not None else None
            out.append(Text(f" {one_line(waste_line(s.waste), 300)}", style=style or "",
                            no_wrap=True, overflow="ellipsis"))
        limited = row.limited
        for srv in limited[:LIMIT_LINES]:
            reason = srv.inflight_limit_reason or "lowered by the saturation guard"
            out.append(Text(f" {srv.name} in-flight limit {srv.inflight_limit} of "
                            f"{srv.max_running}: {one_line(reason, 200)}",
                            style=OVERCOMMIT_STYLE, no_wrap=True, overflow="ellipsis"))
        if len(limited) > LIMIT_LINES:
            out.append(Text(f" … and {len(limited) - LIMIT_LINES} more servers under a "
                            f"lowered limit (Enter: the node's screen)", style=OVERCOMMIT_STYLE))
        if not limited:
            out.append(Text(" every server at its full in-flight limit", style="dim"))
        return out

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return len(self.lines())
