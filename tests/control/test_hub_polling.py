"""Pollers of GET /v1/status (the TUI each second, `status`, scripts) take the snapshot the hub
refreshes every interval: on a busy job a build waits its turn in the store's queue, and a
poll that waited for one cost seconds at 900K prompts. Real SQLite file, the hub's own loop."""

from __future__ import annotations

from dataclasses import replace

import anyio

from state.async_store import AsyncStore
from state.store import Store
from supervisor.contract.status import Status
from supervisor.control.hub import Hub
from tests.fixtures import tui_status_data as data


def _counting_build():
    builds = [0]

    async def build() -> Status:
        builds[0] += 1
        base = data.healthy()
        return replace(base, job=replace(base.job, pending=1000 - builds[0]))

    return builds, build


async def test_a_poll_takes_the_refreshed_snapshot_and_builds_nothing(tmp_path):
    store = Store.open(tmp_path / "job.db")
    builds, build = _counting_build()
    try:
        hub = Hub(AsyncStore(store), build, interval_s=30.0)
        await hub.prime()
        async with anyio.create_task_group() as tg:
            tg.start_soon(hub.run)
            with anyio.fail_after(10):
                while builds[0] == 0:
                    await anyio.sleep(0.01)
            await anyio.sleep(0.3)                  # older than a poll's 0.2 s
            polled = [(await hub.status()).job.pending for _ in range(5)]
            assert builds[0] == 1 and polled == [999] * 5
            hub.invalidate()                        # an action: the next poll sees it
            assert (await hub.status()).job.pending == 998 and builds[0] == 2
            tg.cancel_scope.cancel()
    finally:
        store.close()


async def test_without_the_refresher_a_poll_builds_a_fresh_snapshot(tmp_path):
    store = Store.open(tmp_path / "job.db")
    builds, build = _counting_build()
    try:
        hub = Hub(AsyncStore(store), build, interval_s=30.0)
        assert (await hub.status()).job.pending == 999
        await anyio.sleep(0.3)
        assert (await hub.status()).job.pending == 998 and builds[0] == 2
    finally:
        store.close()
