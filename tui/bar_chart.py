"""Vertical bars from eighth-blocks, scaled from zero (not from the minimum, so a dip from
9.4 to 9.0 req/s looks like the small dip it is)."""

from __future__ import annotations

BLOCKS = " ▁▂▃▄▅▆▇█"


def bar_rows(values: list[float], rows: int, peak: float | None = None) -> list[str]:
    """`rows` lines of len(values) characters, top line first."""
    top = peak if peak else (max(values, default=0.0) or 1.0)
    eighths = [round(max(0.0, v) / top * rows * 8) for v in values]
    lines = []
    for r in range(rows):
        level = (rows - 1 - r) * 8
        lines.append("".join(BLOCKS[min(8, max(0, e - level))] for e in eighths))
    return lines


def bucket_means(values: list[float], width: int) -> list[float]:
    """`values` (oldest first) averaged into at most `width` columns, the newest on the right."""
    if len(values) <= width:
        return list(values)
    out = []
    for c in range(width):
        lo, hi = c * len(values) // width, (c + 1) * len(values) // width
        chunk = values[lo:hi] or values[lo:lo + 1]
        out.append(sum(chunk) / len(chunk))
    return out
