"""What a raise would continue, read for the status in the background on a connection of its
own beside the daemon's writer (real SQLite, WAL): the figures the store itself gives, read
again when asked, and a DB it cannot read said in the log, not created, not fatal."""

from __future__ import annotations

import logging

import anyio
import pytest

from state.records import Completion, Done, TokenIds
from state.store import Store
from supervisor.job.continuable_reader import EVERY_LIMIT, ContinuableReader
from tests.fixtures.state_db import rows


def _truncated(pid: str) -> Done:
    return Done(id=pid, completion=Completion(
                    content="", reasoning_content="thinking", finish_reason="length",
                    prompt_tokens=3, completion_tokens=4, reasoning_tokens=4),
                max_tokens=4, model="m", server="gpu0", started_at=1.0, finished_at=2.0,
                tokens=TokenIds((1, 2, 3), (7, 8, 9, 10), in_reasoning=True))


async def _until(check, what: str) -> None:
    with anyio.move_on_after(10):
        while not check():
            await anyio.sleep(0.01)
        return
    raise AssertionError(f"timed out waiting for {what}")


async def test_reads_beside_the_writer_and_again_when_asked(tmp_path) -> None:
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(3))
        store.record([_truncated(p.id) for p in store.claim(1, "gpu0", 1.0)])
        reader = ContinuableReader(store.path, refresh_s=3600.0, gap_factor=0.0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.run)
            await _until(lambda: reader.latest is not None, "the first read")
            assert reader.latest == store.continuable(EVERY_LIMIT)
            assert (reader.latest.answers, reader.latest.tokens_kept) == (1, 4)
            store.record([_truncated(p.id) for p in store.claim(2, "gpu0", 1.0)])
            reader.want_fresh()
            await _until(lambda: reader.latest is not None and reader.latest.answers == 3,
                         "the read after the change")
            assert reader.latest == store.continuable(EVERY_LIMIT)
            tg.cancel_scope.cancel()


async def test_a_db_it_cannot_read_is_said_and_not_created(
        tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    missing = tmp_path / "nothing.db"
    reader = ContinuableReader(missing, refresh_s=3600.0)
    with caplog.at_level(logging.WARNING, logger="supervisor.job.continuable_reader"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.run)
            await _until(lambda: "continuable answers not read" in caplog.text,
                         "the warning")
            tg.cancel_scope.cancel()
    assert reader.latest is None and not missing.exists()
    assert len([r for r in caplog.records if "not read" in r.message]) == 1
