"""The job across every node: done of total, the summed rate, and the ETA of the slowest
node (the job ends when its last partition does)."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from supervisor.client.fleet_totals import FleetTotals
from supervisor.client.text import duration


class FleetTotalsLine(Widget):
    totals: reactive[FleetTotals | None] = reactive(None)

    def render(self) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        f = self.totals
        if f is None:
            return t.append(" job: waiting for the nodes", style="dim")
        pct = f"{100 * f.done / f.total:.1f}%" if f.total else "—"
        t.append(f" job {f.done:,}/{f.total:,} ({pct})", style="bold")
        t.append(f"  {f.req_per_s:.1f} req/s  ETA ")
        t.append(duration(f.eta_s) if f.eta_s is not None else "?", style="bold")
        t.append(f" ({f.eta_note})", style="dim")
        if f.failed:
            t.append(f"  {f.failed} failed", style="bold red")
        style = "bold white on red" if f.answering < f.nodes or "MIXED" in f.partitions else "dim"
        t.append(f"  {f.answering}/{f.nodes} nodes answer, {f.partitions}", style=style)
        return t
