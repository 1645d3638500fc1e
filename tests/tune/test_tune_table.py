"""The tuner's tables on a real SQLite file: trials an auditor queries, flags kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from state.store import Store
from supervisor.contract.tuning import TrialVerdict


def test_trials_are_written_ended_and_read_back(tmp_path: Path) -> None:
    db = tmp_path / "job.db"
    with Store.open(db) as store:
        tid = store.add_tune_trial("gpu0", "max-running-requests 16 -> 32",
                                   {"max-running-requests": 32}, 100.0)
        store.end_tune_trial(tid, ended_at=200.0, window_s=90.0, answers=40, gain=0.2,
                             noise=0.03, ratio_before=1.0, ratio_after=1.2,
                             verdict=TrialVerdict.KEPT, reason="gain +20%")
        with pytest.raises(ValueError, match="unknown columns"):
            store.end_tune_trial(tid, server="x")
        (t,) = store.tune_trials()
        assert t.id == tid and t.verdict is TrialVerdict.KEPT and t.phase == "ended"
        assert t.flags[0].name == "max-running-requests" and t.flags[0].value == 32
        store.set_tune_flags("gpu0", {"max-running-requests": 32}, 200.0, tid)
        store.set_tune_flags("gpu0", {"max-running-requests": 64}, 300.0, None)
        assert store.tune_flags() == {"gpu0": {"max-running-requests": 64}}
    # What an auditor runs with sqlite3.
    conn = sqlite3.connect(db)
    row = conn.execute("SELECT server, verdict, gain, json_extract(flags, "
                       "'$.max-running-requests') FROM tune_trials").fetchone()
    assert row == ("gpu0", "kept", 0.2, 32)
    conn.close()
