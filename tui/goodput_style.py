"""How a goodput share is coloured wherever dflash-tui shows one: yellow under 90%, red under
75% (a quarter of the GPUs' decoding thrown away). One rule for the node screen's rates line
and the fleet screen's rows, its total and a node's detail."""

from __future__ import annotations

from rich.text import Text


def goodput_style(goodput: float) -> str | None:
    return "bold red" if goodput < 0.75 else "bold yellow" if goodput < 0.9 else None


def goodput_cell(goodput: float | None) -> Text | str:
    if goodput is None:
        return "—"
    return Text(f"{100 * goodput:.1f}%", style=goodput_style(goodput) or "")
