"""Lay short labelled figures out in lines that fit a width, breaking only between figures
(never inside `17.5% trunc`), so a narrow terminal gets two tidy lines instead of a wrap."""

from __future__ import annotations

from rich.text import Text


def flow(cells: list[Text], width: int, gap: str = "  ", indent: str = " ") -> Text:
    lines: list[Text] = []
    line = Text(indent)
    for cell in cells:
        if line.cell_len > len(indent) and line.cell_len + len(gap) + cell.cell_len > width:
            lines.append(line)
            line = Text(indent)
        if line.cell_len > len(indent):
            line.append(gap)
        line.append_text(cell)
    lines.append(line)
    return Text("\n").join(lines)


def figure(value: str, label: str, style: str | None = None, label_first: bool = False) -> Text:
    """`9.4 req/s` (value bold) or `trunc 17.5%` with `label_first`."""
    t = Text()
    if label_first:
        t.append(label + " ", style="dim")
    t.append(value, style=style or "bold")
    if not label_first:
        t.append(" " + label, style="dim")
    return t
