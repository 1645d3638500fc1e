"""Which server-table columns a terminal of a given width shows.

Every row stays; columns give way instead. `server`, `state`, `in fl`, `up` and `last exit`
always stay (who, whether it serves, how busy, how long, why it last died); the others go in
`DROP_ORDER` until the rest fit with room for the exit reason to be read. A column that
says nothing on any row ("n/a" everywhere: no GPU driver) goes before any that does, and
also whenever it would cut an exit reason short.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text

# Most expendable first: utilisation and temperature are nvitop's job; the reason a server
# died and how long it has been up are this table's.
DROP_ORDER = ("util", "temp", "memory", "sglang", "power", "req_s", "restarts")
LAST = "last_exit"
EMPTY = frozenset({"n/a", "—", ""})
# DataTable pads each cell with one space either side.
PADDING = 2
# The exit reason's kind and the start of its cause ("oom: CUDA out of memo…").
MIN_REASON = 18


@dataclass(frozen=True)
class ColumnFit:
    columns: tuple[tuple[str, str], ...]     # (key, heading), in the table's order
    reason_width: int | None                 # characters for the exit reason; None: no limit


def plain(cell: Text | str) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def fit_columns(columns: Sequence[tuple[str, str]], rows: Sequence[Mapping[str, Text | str]],
                width: int | None) -> ColumnFit:
    """The columns that fit `width` cells (None: unknown yet, all of them) and how much of
    the exit reason fits after them."""
    if not width:
        return ColumnFit(tuple(columns), None)

    def need(key: str, heading: str) -> int:
        return max([cell_len(heading)] + [cell_len(plain(r[key])) for r in rows if key in r])

    natural = {key: need(key, heading) for key, heading in columns}
    headings = dict(columns)
    reason_natural = natural.get(LAST, 0)
    reason_min = min(reason_natural, max(MIN_REASON, cell_len(headings.get(LAST, ""))))
    silent = [k for k in DROP_ORDER if k in natural and rows
              and all(plain(r[k]) in EMPTY for r in rows if k in r)]
    order = silent + [k for k in DROP_ORDER if k in natural and k not in silent]
    kept = [key for key, _ in columns]

    def others() -> int:
        return sum(natural[k] + PADDING for k in kept if k != LAST)

    for key in order:
        if others() + reason_min + PADDING <= width:
            break
        kept.remove(key)
    # A column of n/a is worth less than the rest of an exit reason; and once one has gone,
    # the others go too (no GPU figures at all reads better than one column of n/a).
    if any(k not in kept for k in silent) or others() + reason_natural + PADDING > width:
        kept = [k for k in kept if k not in silent]
    chosen = tuple((k, headings[k]) for k in kept)
    if LAST not in kept:
        return ColumnFit(chosen, None)
    room = width - others() - PADDING
    return ColumnFit(chosen, max(cell_len(headings[LAST]), min(reason_natural, room)))
