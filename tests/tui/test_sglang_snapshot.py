"""SGLang's own figures in the server table (its /metrics, with --enable-metrics): the
`sgl run/q kv` column, a server flagged over-committed in orange, one retracting, one whose
figures are n/a, and the over-commit event in the log; without any figures the column is
not there (the other snapshots)."""

from __future__ import annotations

from dataclasses import replace

from supervisor.contract.status import ServerStatus, Status
from tests.fixtures import tui_status_data as data
from tests.fixtures.tui_pilot import WIDE, app_with, settled
from tui.event_text import describe
from tui.widgets.servers.server_table import columns_for, sglang_cell

REASON = ("queue held over 3 polls (9 -> 11 waiting) while running 52 of our 63 in flight")


def _with_sglang(s: ServerStatus, i: int) -> ServerStatus:
    s = replace(s, sglang_metrics=True, sglang_running=s.in_flight, sglang_queued=0,
                token_usage=0.80 + 0.02 * i, retractions=0, retractions_per_s=0.0,
                gen_throughput=s.tok_per_s * 1.1)
    if i == 2:
        return replace(s, sglang_running=52, sglang_queued=11, token_usage=0.97,
                       overcommitted=True, overcommit_reason=REASON)
    if i == 5:
        return replace(s, retractions=340, retractions_per_s=0.2)
    if i == 7:
        return replace(s, sglang_running=None, sglang_queued=None, token_usage=None,
                       retractions_per_s=None, gen_throughput=None,
                       sglang_error="/metrics: no answer within 5 s")
    return s


def with_sglang() -> Status:
    s = data.healthy()
    events = s.recent_events + (data.event(107, "server_overcommit", "gpu2",
                                           {"overcommitted": True, "reason": REASON,
                                            "running": 52, "queued": 11, "in_flight": 63}),)
    return replace(s, servers=tuple(_with_sglang(x, i) for i, x in enumerate(s.servers)),
                   recent_events=events)


def test_server_table_with_sglang_metrics(snap_compare) -> None:
    """The sgl column after in-flight: running/queued and KV use per server, gpu2 OVER in
    orange, gpu5 retracting 12 a minute, gpu7 n/a; the over-commit event in the log."""
    assert snap_compare(app_with(with_sglang), terminal_size=WIDE, run_before=settled)


def test_cells_and_column_rule() -> None:
    s = with_sglang()
    cells = [str(sglang_cell(x)) for x in s.servers]
    assert cells[0] == "60/0 80%"
    assert cells[2] == "52/11 97% OVER"
    assert cells[5] == "60/0 90% ↺12/m"
    assert cells[7] == "n/a"
    assert str(sglang_cell(data.healthy().servers[0])) == "—"
    assert "sglang" in dict(columns_for(s.servers))
    assert "sglang" not in dict(columns_for(data.healthy().servers))


def test_overcommit_event_lines() -> None:
    on = data.event(1, "server_overcommit", "gpu2", {"overcommitted": True, "reason": REASON})
    off = data.event(2, "server_overcommit", "gpu2",
                     {"overcommitted": False, "reason": "the server left READY"})
    assert describe(on) == f"gpu2 over-committed: {REASON}"
    assert describe(off) == "gpu2 no longer over-committed: the server left READY"
