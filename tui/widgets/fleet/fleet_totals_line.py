"""The job across every node: done of total, the summed rate and the ETA of the slowest node
(the job ends when its last partition does); then how many nodes answer and the job's goodput
(every node's kept tokens over every node's generated tokens) with the tokens thrown away;
and, while there are any, how many servers run under an in-flight limit the saturation guard
lowered (a third line, so that 80 columns still show it whole)."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from supervisor.client.fleet_totals import FleetTotals
from supervisor.client.text import duration
from tui.formatting import count
from tui.goodput_style import goodput_style
from tui.widgets.servers.server_table import OVERCOMMIT_STYLE


class FleetTotalsLine(Widget):
    totals: reactive[FleetTotals | None] = reactive(None, layout=True)

    def render(self) -> Text:
        f = self.totals
        if f is None:
            return Text(" job: waiting for the nodes", style="dim", no_wrap=True)
        lines = [self._progress(f), self._health(f)]
        if f.limited_servers:
            lines.append(Text(f" in-flight limit lowered on {f.limited_servers} of {f.servers} "
                              "servers by the saturation guard", style=OVERCOMMIT_STYLE))
        return Text("\n").join(lines)

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return 3 if self.totals is not None and self.totals.limited_servers else 2

    @staticmethod
    def _progress(f: FleetTotals) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        pct = f"{100 * f.done / f.total:.1f}%" if f.total else "—"
        t.append(f" job {f.done:,}/{f.total:,} ({pct})", style="bold")
        t.append(f"  {f.req_per_s:.1f} req/s  ETA ")
        t.append(duration(f.eta_s) if f.eta_s is not None else "?", style="bold")
        t.append(f" ({f.eta_note})", style="dim")
        if f.failed:
            t.append(f"  {f.failed} failed", style="bold red")
        return t

    @staticmethod
    def _health(f: FleetTotals) -> Text:
        t = Text(" ", no_wrap=True, overflow="ellipsis")
        style = "bold white on red" if not f.all_accounted or "MIXED" in f.partitions else "dim"
        t.append(f"{f.nodes_line}, {f.partitions}", style=style)
        if f.goodput is not None:
            t.append("  goodput ")
            t.append(f"{100 * f.goodput:.1f}%", style=goodput_style(f.goodput) or "bold")
            t.append(f" ({count(f.wasted_tokens)} tokens wasted)", style="dim")
        return t
