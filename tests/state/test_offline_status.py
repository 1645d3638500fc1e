"""`dflash-supervisor status --state DB` without a daemon: truncation split into long and
looping and how much was cut off inside the thinking, and the energy the daemon carried in
the DB."""

from __future__ import annotations

from state.settings_keys import Setting
from state.store import Store
from supervisor.commands.offline_status import main, summary_json
from supervisor.contract.event_kinds import EventKind
from tests.fixtures.state_db import done, rows


def test_truncation_split_and_energy_from_the_db(tmp_path, capsys):
    path = tmp_path / "job.db"
    with Store.open(path) as store:
        store.import_batch(rows(3))
        ids = [c.id for c in store.claim(3, "gpu0", 1.0)]
        store.record([done(ids[0], 2.0, finish="length", content=""),    # inside the thinking
                      done(ids[1], 2.1, finish="length", loop=True), done(ids[2], 2.2)])
        store.set_setting(Setting.ENERGY_JOULES, repr(2 * 3.6e6))
    assert main(str(path), events=0) == 0
    out = capsys.readouterr().out
    assert "truncated 2: 1 long, 1 looping" in out and "energy   2.00 kWh" in out
    assert "1 cut off inside the thinking (no answer)" in out
    summary = summary_json(str(path))
    assert summary is not None
    assert summary["truncated"] == {"long": 1, "looping": 1, "in_thinking": 1}
    assert summary["energy_kwh"] == 2.0


def test_a_long_event_detail_is_cut_with_an_ellipsis(tmp_path, capsys):
    path = tmp_path / "job.db"
    with Store.open(path) as store:
        store.add_event(EventKind.CONFIG_RELOAD, "job", {"changed": "x" * 400}, "systemd", 1.0)
        store.add_event(EventKind.PAUSED, "operator", {"why": "short"}, "systemd", 2.0)
    assert main(str(path), events=2) == 0
    lines = capsys.readouterr().out.splitlines()
    long_line = next(line for line in lines if "config_reload" in line)
    assert long_line.endswith("x…") and '"x' in long_line
    short_line = next(line for line in lines if "paused" in line)
    assert short_line.endswith('{"why": "short"}')
