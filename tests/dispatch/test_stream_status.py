"""What watching streamed requests found reaches the status contract (and its JSON)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from supervisor.contract import codec
from supervisor.contract import status as c
from supervisor.dispatch.dispatch_snapshot import StreamFigures
from supervisor.job.contract_status import build_status
from tests.fixtures.dispatching import job_config
from tests.fixtures.job_status import job_status


def test_loops_aborted_tokens_saved_and_stalls_are_in_the_status(tmp_path: Path) -> None:
    js = job_status(tmp_path)
    js = replace(js, dispatch=replace(js.dispatch, streamed=StreamFigures(
        stalls=4, loops_aborted=3, loop_tokens_saved=41_000)))
    status = build_status(js, job_config(tmp_path), started_at=0.0,
                          histogram=((0, 1), (0,), 0))
    q = codec.loads(c.Status, codec.dumps(status)).quality
    assert (q.loops_aborted_total, q.loop_tokens_saved, q.stalled_total) == (3, 41_000, 4)
