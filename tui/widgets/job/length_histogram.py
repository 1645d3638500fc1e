"""Output lengths of recent completions, with the live max tokens marked.

A pile-up of completions at the limit (truncation) shows as a red bar at the marker, so
"raise max tokens?" is answered by looking, not by reading a percentage.
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from supervisor.contract.status import Histogram, Status
from tui.bar_chart import bar_rows
from tui.formatting import count


def columns(h: Histogram, width: int) -> tuple[list[float], int, int]:
    """The histogram re-bucketed to `width` columns over 0..top: (values, top, marker column).
    A bucket's count is spread over the columns it overlaps, in proportion."""
    top = max(h.edges[-1] if h.edges else 0, math.ceil(h.max_tokens * 1.06), 1)
    per_col = top / width
    values = [0.0] * width

    def col(x: float) -> int:
        return min(width - 1, max(0, int(x / per_col)))

    for i, n in enumerate(h.counts):
        if not n:
            continue
        lo, hi = h.edges[i], h.edges[i + 1]
        if hi <= lo:
            values[col(lo)] += n
            continue
        first, last = col(lo), col(hi - 1e-9)
        for c in range(first, last + 1):
            overlap = min(hi, (c + 1) * per_col) - max(lo, c * per_col)
            values[c] += n * max(0.0, overlap) / (hi - lo)
    # The marker sits on the column of the last length that is still under the limit, where
    # completions cut off at max tokens land.
    return values, top, col(max(0, h.max_tokens - 1))


class LengthHistogram(Widget):
    status: reactive[Status | None] = reactive(None)

    def render(self) -> Text:
        s = self.status
        width, height = self.size.width, self.size.height
        if s is None or width < 10 or height < 3:
            return Text("")
        h = s.output_lengths
        title = self._title(h.max_tokens, h.samples, width)
        if not h.samples:
            return title + Text("\n no completions yet", style="dim")
        rows = height - 2
        values, top, marker = columns(h, width)
        lines = [title]
        for line in bar_rows(values, rows):
            text = Text(line, style="cyan")
            # The marker column: its bar in red, and a red rule where it has none.
            cell = line[marker]
            text = text[:marker] + Text(cell if cell != " " else "┃", style="bold red") + \
                text[marker + 1:]
            lines.append(text)
        lines.append(self._axis(width, top, marker, h.max_tokens))
        return Text("\n").join(lines)

    @staticmethod
    def _title(max_tokens: int, samples: int, width: int) -> Text:
        """The longest title that fits (half an 80-column screen holds ~38 cells): the
        limit and what the bars count are both kept, in fewer words."""
        forms = ((f"max tokens {max_tokens:,}", f"  output length of {samples:,} recent"),
                 (f"max tokens {max_tokens:,}", f"  lengths of {samples:,} recent"),
                 (f"max {max_tokens:,}", f"  lengths of {samples:,} recent"),
                 (f"max {max_tokens:,}", f"  {samples:,} lengths"))
        for limit, what in forms:
            if len(limit) + len(what) + 2 <= width:
                break
        title = Text(f"┃ {limit}", style="bold red")
        title.append(what, style="")
        title.truncate(width, overflow="ellipsis")
        return title

    @staticmethod
    def _axis(width: int, top: int, marker: int, max_tokens: int) -> Text:
        cells = [" "] * width
        left, right = "0", count(top)
        mark, start = f"▲{count(max_tokens)}", marker
        if start + len(mark) > width:   # no room to the right: the label ends at the marker
            mark = f"{count(max_tokens)}▲"
            start = max(len(left) + 1, marker - len(mark) + 1)
        for i, ch in enumerate(left):
            cells[i] = ch
        if start + len(mark) + len(right) < width:   # the top only where it fits
            for i, ch in enumerate(right):
                cells[width - len(right) + i] = ch
        for i, ch in enumerate(mark):
            cells[start + i] = ch
        axis = Text("".join(cells), style="dim")
        axis.stylize("bold red", start, start + len(mark))
        return axis
