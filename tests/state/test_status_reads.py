"""A live status's DB figures in one store call (state/status_reads.py): the same figures the
separate queries give, at the live max tokens."""

from __future__ import annotations

from state.records import StatusCounts
from state.store import Store
from tests.fixtures.state_db import done, rows


def test_status_figures_are_the_counts_truncations_floors_and_ledger(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(6))
        ids = [c.id for c in store.claim(5, "gpu0", 1.0)]
        store.record([done(ids[0], 2.0, finish="length", max_tokens=100),
                      done(ids[1], 2.1, finish="length", max_tokens=100, loop=True),
                      done(ids[2], 2.2, finish="length", max_tokens=300),
                      done(ids[3], 2.3)])
        store.requeue_truncated(200)                     # ids[0] waits, floored at 100
        f = store.status_figures(400)
        assert f.counts == StatusCounts(pending=2, in_flight=1, done=3) == store.counts()
        assert f.pending_floors == {100: 1} == store.pending_floors()
        assert f.requeueable_truncated == 1 == store.truncated_count(400, False)  # ids[2]
        assert f.truncated == 1 == store.truncated_count(None, False)
        assert f.ledger == store.token_ledger()
        assert store.status_figures(200).requeueable_truncated == 0   # 300 is not below 200
