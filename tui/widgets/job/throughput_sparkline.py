"""Requests per second over the last minutes, from the daemon's own history (so a freshly
attached TUI shows the trend at once). Bars start at zero: a stall reads as a stall."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from supervisor.client.text import duration
from supervisor.contract.status import Status
from tui.bar_chart import bar_rows, bucket_means


class ThroughputSparkline(Widget):
    status: reactive[Status | None] = reactive(None)

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        points = self.status.throughput if self.status is not None else ()
        if not points:
            return Text("req/s: no history yet", style="dim")
        values = [p.req_per_s for p in points]
        span = points[-1].time - points[0].time
        title = Text(f"req/s, last {duration(span)}: now ", no_wrap=True, overflow="ellipsis")
        title.append(f"{values[-1]:.1f}", style="bold")
        title.append(f"  peak {max(values):.1f}")
        title.truncate(width, overflow="ellipsis")
        rows = max(1, height - 2)      # the title above, a blank line below (as the histogram's axis)
        columns = bucket_means(values, width)
        lines = [title] + [Text(line.rjust(width), style="green")
                           for line in bar_rows(columns, rows)]
        return Text("\n").join(lines)
