"""The waste ledger and the saturation guard in dflash-tui: a goodput cell (and the tokens
thrown away) in the job's rates line, and a server whose in-flight limit the guard lowered
shown as `18/20↓` in orange; without them the other snapshots are unchanged."""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text

from supervisor.contract.status import Status, Waste, WasteCount
from tests.fixtures import tui_status_data as data
from tests.fixtures.tui_pilot import WIDE, app_with, settled
from tui.event_text import describe
from tui.widgets.job.job_progress import JobProgress
from tui.widgets.servers.server_table import in_flight_cell

REASON = "over-committed: retracting 42.0 requests/min over the last 6 polls (over 10/min)"


def waste_and_limit() -> Status:
    s = data.healthy()
    waste = Waste(kept_tokens=372_000_000, wasted_tokens=31_000_000,
                  goodput=372 / 403, causes=(
                      WasteCount("crash", 12, 410_000), WasteCount("stop", 0, 0),
                      WasteCount("loop", 2_950, 24_100_000), WasteCount("stall", 31, 90_000),
                      WasteCount("retry", 77, 400_000), WasteCount("requeue", 1_200, 6_000_000)))
    servers = list(s.servers)
    servers[3] = replace(servers[3], in_flight=48, inflight_limit=48,
                         inflight_limit_reason=REASON)
    events = s.recent_events + (data.event(108, "inflight_limit", "gpu3",
                                           {"from": 64, "to": 48, "max": 64,
                                            "reason": REASON + "; lowered by a step of 8"}),)
    return replace(s, waste=waste, servers=tuple(servers), recent_events=events)


def test_goodput_and_a_lowered_in_flight_limit(snap_compare) -> None:
    """The rates line ends with goodput 92.3%; gpu3's in-flight cell
    reads 48/48↓ in orange; the inflight_limit event in the log."""
    assert snap_compare(app_with(waste_and_limit), terminal_size=WIDE, run_before=settled)


def test_the_cells() -> None:
    s = waste_and_limit()
    cell = in_flight_cell(s.servers[3])
    assert isinstance(cell, Text) and str(cell) == "48/48↓"
    assert in_flight_cell(s.servers[0]) == "60/64"
    assert in_flight_cell(replace(s.servers[0], inflight_limit=64)) == "60/64"
    rates = JobProgress._waste_cells(s)
    # The cause that lost the most tokens is named beside it (issue 41).
    assert [str(c) for c in rates] == ["goodput 92.3%", "lost to loop 78%"]
    assert JobProgress._waste_cells(data.healthy()) == []
    assert JobProgress._waste_cells(replace(s, waste=Waste())) == []
    assert describe(s.recent_events[-1]).startswith(
        "gpu3 in-flight limit 64 → 48 of 64: over-committed: retracting")
