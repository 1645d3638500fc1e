"""SGLang's figures beside ours, read true: the status contract carries the age of the
/metrics sample they come from, and the server table shows an old sample dim with its age,
and, while dispatch is paused, that SGLang still runs what was sent before the pause
(`in fl` counts only ours on the wire; SGLang counts every request it holds)."""

from __future__ import annotations

import json
from dataclasses import replace

from rich.text import Text

from supervisor.contract.status import PauseReason, ServerStatus, Status
from tests.fixtures import tui_status_data as data
from tests.fixtures.tui_pilot import WIDE, app_with, settled
from tui.screens.help_screen import COLUMNS
from tui.widgets.servers.server_table import ServerTable, sglang_cell


def _sampled(s: ServerStatus, i: int) -> ServerStatus:
    # gpu0: a fresh sample; gpu1: its last scrape 12 s ago at a 1 s interval (stale).
    return replace(s, in_flight=7, sglang_metrics=True, sglang_running=26, sglang_queued=0,
                   token_usage=0.91, retractions_per_s=0.0, sglang_interval_s=1.0,
                   sglang_age_s=12.0 if i == 1 else 0.4)


def sampled() -> Status:
    s = data.healthy()
    return replace(s, servers=tuple(_sampled(x, i) for i, x in enumerate(s.servers)))


def paused_and_sampled() -> Status:
    return replace(sampled(), paused=(PauseReason("operator", "paused by operator"),))


def test_the_sample_age_round_trips_and_an_older_daemon_sends_none() -> None:
    s = sampled()
    assert Status.from_json(s.to_json()) == s
    assert s.servers[1].sglang_age_s == 12.0 and s.servers[1].sglang_interval_s == 1.0
    # A daemon from before the field: its snapshot has neither key.
    plain = json.loads(s.to_json())
    for server in plain["servers"]:
        del server["sglang_age_s"], server["sglang_interval_s"]
    old = Status.from_json(json.dumps(plain))
    assert old.servers[0].sglang_age_s is None and old.servers[0].sglang_interval_s is None
    assert str(sglang_cell(old.servers[0])) == "26/0 91%"   # no age: shown as it comes


def test_cells_say_an_old_sample_and_a_pause() -> None:
    fresh, stale = sampled().servers[:2]
    assert sglang_cell(fresh) == "26/0 91%"
    cell = sglang_cell(stale)
    assert isinstance(cell, Text) and cell.plain == "26/0 91% 12s old" and cell.style == "dim"
    # Two intervals is the edge: a sample just under it is current.
    assert sglang_cell(replace(stale, sglang_age_s=1.9)) == "26/0 91%"
    paused = sglang_cell(fresh, paused=True)
    assert isinstance(paused, Text) and paused.plain == "still 26/0 91%"
    assert str(sglang_cell(stale, paused=True)) == "still 26/0 91% 12s old"
    # Nothing running there while paused: nothing "still" runs.
    assert sglang_cell(replace(fresh, sglang_running=0), paused=True) == "0/0 91%"
    # An over-committed server stays orange, its age said.
    over = sglang_cell(replace(stale, overcommitted=True))
    assert isinstance(over, Text) and over.plain == "26/0 91% 12s old OVER"


async def test_the_table_while_paused_with_a_stale_sample() -> None:
    """What an operator sees: `in fl 7/..` beside `still 26/0`, the stale
    row with its age; the help names both marks."""
    app = app_with(paused_and_sampled)
    async with app.run_test(size=WIDE) as pilot:
        await settled(pilot)
        table = app.screen.query_one(ServerTable)
        headings = [str(c.label) for c in table.columns.values()]
        assert "in fl" in headings and "sgl run/q kv" in headings, headings
        assert str(table.get_cell("gpu0", "sglang")) == "still 26/0 91%"
        assert str(table.get_cell("gpu1", "sglang")) == "still 26/0 91% 12s old"
        assert str(table.get_cell("gpu0", "in_flight")).startswith("7/")
        # Resumed: the same figures, no longer marked as running on from before a pause.
        app.screen.query_one(ServerTable).status = sampled()
        await settled(pilot)
        assert str(table.get_cell("gpu0", "sglang")) == "26/0 91%"
    help_text = " ".join(what for _, what in COLUMNS)
    assert "`still`: paused, runs what was sent" in help_text
    assert "`12s old`: stale sample" in help_text


def test_server_table_paused_with_a_stale_sample(snap_compare) -> None:
    """Paused: every server's SGLang figures dim as `still 26/0 91%` beside `in fl 7/..`;
    gpu1's sample 12 s old says so."""
    assert snap_compare(app_with(paused_and_sampled), terminal_size=WIDE, run_before=settled)
