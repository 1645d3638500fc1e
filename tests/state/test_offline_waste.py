"""`dflash-supervisor status --state DB` without a daemon says the waste ledger: goodput and
the tokens thrown away by cause, in text and in the JSON summary."""

from __future__ import annotations

from state.store import Store
from state.waste_table import Wasted
from supervisor.commands.offline_status import main, summary_json
from supervisor.contract.waste_causes import WasteCause
from tests.fixtures.state_db import done, rows


def test_goodput_and_waste_by_cause_from_the_db(tmp_path, capsys):
    path = tmp_path / "job.db"
    with Store.open(path) as store:
        store.import_batch(rows(3))
        ids = [c.id for c in store.claim(3, "gpu0", 1.0)]
        # done() answers hold 20 completion tokens each; one loops.
        store.record([done(ids[0], 2.0), done(ids[1], 2.1, finish="length", loop=True),
                      Wasted(WasteCause.STALL, 10, 2.2, ids[2], "gpu0")])
    assert main(str(path), events=0) == 0
    out = capsys.readouterr().out
    assert "waste    goodput 40.0%: 20 tokens kept, 30 wasted (loop 20, stall 10)" in out
    summary = summary_json(str(path))
    assert summary is not None
    waste = summary["waste"]
    assert waste["kept_tokens"] == 20 and waste["wasted_tokens"] == 30      # type: ignore[index]
    assert waste["goodput"] == 0.4                                          # type: ignore[index]
    assert waste["causes"]["stall"] == {"requests": 1, "tokens": 10}        # type: ignore[index]


def test_no_waste_line_before_any_token(tmp_path, capsys):
    path = tmp_path / "job.db"
    with Store.open(path) as store:
        store.import_batch(rows(1))
    assert main(str(path), events=0) == 0
    assert "waste" not in capsys.readouterr().out
