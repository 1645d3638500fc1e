"""Requests per second over the last minutes, from the daemon's own history (so a freshly
attached TUI shows the trend at once)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Label, Sparkline

from supervisor.control.contract import Status
from tui.formatting import duration


class ThroughputSparkline(Widget):
    status: reactive[Status | None] = reactive(None)

    def compose(self) -> ComposeResult:
        yield Label("req/s", id="throughput-title")
        yield Sparkline([], id="throughput-spark")

    def watch_status(self, s: Status | None) -> None:
        title = self.query_one("#throughput-title", Label)
        spark = self.query_one("#throughput-spark", Sparkline)
        points = s.throughput if s is not None else ()
        if not points:
            title.update("req/s: no history yet")
            spark.display = False
            return
        spark.display = True
        values = [p.req_per_s for p in points]
        span = points[-1].time - points[0].time
        title.update(f"req/s, {duration(span)}: now {values[-1]:.1f} peak {max(values):.1f}")
        spark.data = values
