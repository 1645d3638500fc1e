"""The end of a job: with nothing left to claim, a server whose slots stand idle takes over
the prompts another server buffered for its busy slots (supervisor/dispatch/serving.py).
Real simulated servers (child processes, loopback HTTP) and a real SQLite store."""

from __future__ import annotations

import anyio

from state.store import Store
from supervisor.servers.endpoint import Endpoint
from tests.fixtures.dispatching import db_rows, dispatching, job_config, open_store, wait_until


async def test_an_idle_server_takes_over_a_busy_servers_buffered_prompts(tmp_path, sim_server):
    # One slot each, so each feeder buffers one prompt beside the one in flight. The slow
    # server spends seconds on a request; the fast one answers at once and runs out of
    # prompts long before: the prompt the slow one buffered must not wait for its slot.
    slow = sim_server("--sim-tokens-per-s", "15", "--max-running-requests", "1")
    fast = sim_server("--sim-instant", "--max-running-requests", "1")
    rows = [{"id": f"p{i:03d}", "messages": [{"role": "user", "content": f"Question {i}?"}]}
            for i in range(12)]
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, generation={"max_tokens": 48})
    try:
        async with dispatching(store, cfg) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("slow", slow.base_url, 1), draining)
                await wait_until(lambda: d.progress("slow").in_flight == 1, 20,
                                 "the slow server's first request")
                tg.start_soon(d.serve, Endpoint("fast", fast.base_url, 1), draining)

                async def finished() -> bool:
                    return (await astore.call(Store.counts)).done == len(rows)
                await wait_until(finished, 60, "every prompt done")
                draining.set()
    finally:
        store.close()
    by_server = dict(db_rows(tmp_path, "select server, count(*) from prompts "
                                       "where status = 'done' group by server"))
    assert by_server == {"slow": 1, "fast": len(rows) - 1}, by_server
