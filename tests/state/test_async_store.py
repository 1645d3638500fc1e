"""AsyncStore: Store methods from async code, off the event loop, one at a time."""

from __future__ import annotations

import threading

import anyio

from state.async_store import AsyncStore
from state.records import Requeue
from state.store import Store

from tests.fixtures.state_db import rows


async def test_unbound_and_bound_methods_run_in_a_worker_thread(tmp_path):
    store = Store.open(tmp_path / "job.db")
    try:
        astore = AsyncStore(store)
        await astore.call(Store.import_batch, rows(4))
        claimed = await astore.call(store.claim, 2, "gpu0", 1.0)
        assert [c.id for c in claimed] == ["p0000", "p0001"]
        await astore.call(Store.record, [Requeue("p0000")])
        assert (await astore.call(Store.counts)).pending == 3
        loop_thread = threading.get_ident()
        assert await astore.call(lambda s: threading.get_ident(), ) != loop_thread
    finally:
        store.close()


async def test_concurrent_claims_never_hand_out_a_prompt_twice(tmp_path):
    store = Store.open(tmp_path / "job.db")
    try:
        astore = AsyncStore(store)
        await astore.call(Store.import_batch, rows(200))
        got: list[str] = []

        async def worker(name: str) -> None:
            for _ in range(100):
                batch = await astore.call(Store.claim, 3, name, 1.0)
                if not batch:
                    return
                got.extend(c.id for c in batch)

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(worker, f"gpu{i}")
        assert sorted(got) == [r.id for r in rows(200)]
    finally:
        store.close()


async def test_a_cancelled_caller_still_gets_its_claim_committed(tmp_path):
    store = Store.open(tmp_path / "job.db")
    try:
        astore = AsyncStore(store)
        await astore.call(Store.import_batch, rows(3))
        with anyio.CancelScope() as scope:
            scope.cancel()
            # The call is refused before it starts or it runs to the end; never half-way.
            await astore.call(Store.claim, 3, "gpu0", 1.0)
        counts = await astore.call(Store.counts)
        assert counts.total == 3 and counts.in_flight in (0, 3)
    finally:
        store.close()
