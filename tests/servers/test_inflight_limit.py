"""A server's live in-flight limit (supervisor/servers/inflight_limit.py): lowered while
requests run, none of them is cancelled, and the workers beyond it wait for a slot."""

from __future__ import annotations

import anyio
import pytest

from state.store import Store
from supervisor.servers.endpoint import Endpoint
from supervisor.servers.inflight_limit import InFlightLimit
from tests.fixtures.dispatching import db_rows, dispatching, job_config, open_store, wait_until


def test_the_limit_is_clamped_to_one_and_the_max():
    limit = InFlightLimit(8)
    assert (limit.limit, limit.lowered) == (8, False)
    assert limit.set(3, "queueing") == 3 and limit.lowered and limit.reason == "queueing"
    assert limit.set(0, "x") == 1 and limit.set(99, "x") == 8
    assert limit.reason is None                   # back at the max: nothing to explain
    with pytest.raises(ValueError, match="max_running must be at least 1"):
        InFlightLimit(0)


async def test_holders_keep_their_slots_when_the_limit_drops():
    limit = InFlightLimit(4)
    release = anyio.Event()
    held = 0
    at_entry: list[int] = []           # how many held a slot as each late task got one

    async def hold(late: bool) -> None:
        nonlocal held
        async with limit.slot():
            held += 1
            if late:
                at_entry.append(held)
            await release.wait()
            await anyio.sleep(0)
            held -= 1

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(hold, False)
        await wait_until(lambda: held == 4, 5, "four holders")
        limit.set(2)
        for _ in range(3):
            tg.start_soon(hold, True)
        await anyio.sleep(0.05)
        assert held == 4 and at_entry == []        # none cancelled, none let in
        release.set()
    assert len(at_entry) == 3 and max(at_entry) <= 2


async def test_raising_the_limit_lets_waiters_in_without_a_release():
    limit = InFlightLimit(4)
    limit.set(1)
    release = anyio.Event()
    inside = 0

    async def hold() -> None:
        nonlocal inside
        async with limit.slot():
            inside += 1
            await release.wait()

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(hold)
        await wait_until(lambda: inside == 1, 5, "one holder")
        await anyio.sleep(0.05)
        assert inside == 1 and limit.held == 1
        limit.set(3)
        await wait_until(lambda: inside == 3, 5, "the waiters let in")
        assert limit.held == 3
        release.set()
    assert limit.held == 0


async def test_a_cancelled_waiter_takes_no_slot():
    limit = InFlightLimit(1)
    async with limit.slot():
        with anyio.move_on_after(0.05):
            async with limit.slot():
                raise AssertionError("let in beyond the limit")
        assert limit.held == 1
    assert limit.held == 0


async def test_a_lowered_limit_is_honoured_without_cancelling_a_request(tmp_path, sim_server):
    # 100 tokens/s and 40 at most: each request runs ~0.4 s, long enough to be seen.
    sim = sim_server("--sim-tokens-per-s", "100", "--sim-seed", "5", "--reasoning-parser",
                     "qwen3")
    rows = [{"id": f"q{i:03d}", "messages": [{"role": "user", "content": f"Question {i}?"}]}
            for i in range(40)]
    store = open_store(tmp_path, rows)
    seen_after: list[int] = []
    try:
        cfg = job_config(tmp_path, generation={"max_tokens": 40})
        async with dispatching(store, cfg) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 8), draining)
                await wait_until(lambda: d.progress("gpu0").in_flight == 8, 30, "8 in flight")
                limit = d.inflight_limit("gpu0")
                assert limit is not None and limit.max == 8
                completed = d.progress("gpu0").completed
                limit.set(2, "test")
                # The 8 already sent run to their end; from then on at most 2 are in flight.
                await wait_until(lambda: d.progress("gpu0").completed >= completed + 8, 30,
                                 "the requests in flight to finish")
                while (await astore.call(Store.counts)).done < len(rows):
                    seen_after.append(d.progress("gpu0").in_flight)
                    await anyio.sleep(0.01)
                draining.set()
            assert d.inflight_limit("gpu0") is None        # the life is over
    finally:
        store.close()
    assert seen_after and max(seen_after) <= 2
    # Nothing was cut off or retried: every prompt answered at its first attempt.
    assert db_rows(tmp_path, "SELECT status, attempts, count(*) FROM prompts GROUP BY 1, 2"
                   ) == [("done", 1, len(rows))]
