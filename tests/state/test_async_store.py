"""AsyncStore: Store methods from async code, off the event loop, one at a time."""

from __future__ import annotations

import sqlite3
import threading
import time

import anyio
import pytest

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


async def test_queued_calls_run_back_to_back_while_the_event_loop_is_busy(tmp_path):
    """The worker takes the next call as soon as one ends: twenty calls queued together all
    run while the loop is held busy (a daemon's loop saturated by streamed chunks). Handed
    on by the loop, one call a loop turn, only the first would have run."""
    store = Store.open(tmp_path / "job.db")
    try:
        astore = AsyncStore(store)
        await astore.call(Store.import_batch, rows(20))
        ran: list[int] = []

        def one(s: Store, i: int) -> None:
            s.counts()
            ran.append(i)

        async def caller(i: int) -> None:
            await astore.call(one, i)

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(caller, i)
            await anyio.sleep(0)                  # every caller has queued its call
            # Hold the loop (no await) until the calls are done, 10 s at most.
            deadline = time.monotonic() + 10
            while len(ran) < 20 and time.monotonic() < deadline:
                pass
            ran_while_busy = len(ran)
        assert ran_while_busy == 20 and sorted(ran) == list(range(20))
    finally:
        store.close()


async def test_a_call_cancelled_while_queued_never_runs(tmp_path):
    store = Store.open(tmp_path / "job.db")
    try:
        astore = AsyncStore(store)
        await astore.call(Store.import_batch, rows(3))
        gate = threading.Event()
        first_running = threading.Event()

        def held(s: Store) -> str:
            first_running.set()
            gate.wait(10)
            return "first"

        async with anyio.create_task_group() as tg:
            results: list[str] = []

            async def first() -> None:
                results.append(await astore.call(held))

            tg.start_soon(first)
            await anyio.to_thread.run_sync(first_running.wait, 10)
            with anyio.CancelScope() as scope:
                scope.cancel()
                await astore.call(Store.claim, 3, "gpu0", 1.0)   # queued behind `held`
            gate.set()
        assert results == ["first"]
        assert (await astore.call(Store.counts)).in_flight == 0     # the claim never ran
    finally:
        store.close()


async def test_close_closes_the_store_after_the_calls_queued_before_it(tmp_path):
    store = Store.open(tmp_path / "job.db")
    astore = AsyncStore(store)
    async with anyio.create_task_group() as tg:
        tg.start_soon(astore.call, Store.import_batch, rows(5))
        await anyio.sleep(0)
        await astore.close()
    with pytest.raises(sqlite3.ProgrammingError):   # closed: a later call says so, never hangs
        await astore.call(Store.counts)
    with Store.open(tmp_path / "job.db") as again:
        assert again.counts().pending == 5
