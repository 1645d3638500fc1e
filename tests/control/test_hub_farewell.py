"""The hub's last word when the daemon goes: readers of the event stream get one fresh
snapshot before the stream ends (the fleet screen reads a node's end from it), and a store
that fails then costs nothing but that snapshot. Real SQLite file."""

from __future__ import annotations

from dataclasses import replace

from state.async_store import AsyncStore
from state.store import Store
from supervisor.contract.status import Status, parse_stream_line
from supervisor.control.hub import Hub
from tests.fixtures import tui_status_data as data


async def test_readers_get_a_fresh_snapshot_before_the_stream_ends(tmp_path):
    store = Store.open(tmp_path / "job.db")
    builds = 0

    async def build() -> Status:
        nonlocal builds
        builds += 1
        base = data.healthy()
        return replace(base, job=replace(base.job, pending=100 - builds))

    try:
        hub = Hub(AsyncStore(store), build, 60.0)
        await hub.prime()
        assert (await hub.status()).job.pending == 99       # a snapshot is cached
        sub = hub.subscribe()
        await hub.farewell()
        hub.close()
        items = [parse_stream_line(line) for _, line in await sub.next_batch()]
        assert isinstance(items[-1], Status) and items[-1].job.pending == 98   # built fresh
        assert await sub.next_batch() == []                 # then the stream ends
    finally:
        store.close()


async def test_a_failing_build_leaves_the_farewell_out_and_nothing_else(tmp_path):
    store = Store.open(tmp_path / "job.db")

    async def broken() -> Status:
        raise OSError("disk gone")

    try:
        hub = Hub(AsyncStore(store), broken, 60.0)
        await hub.prime()
        sub = hub.subscribe()
        await hub.farewell()
        hub.close()
        assert await sub.next_batch() == []
    finally:
        store.close()
