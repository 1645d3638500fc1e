"""Real stores and a real dispatcher around simulated servers, for the dispatch tests."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import anyio

from state.async_store import AsyncStore
from state.records import ImportRow
from state.store import Store
from supervisor.config import JobConfig, parse_config
from supervisor.dispatch.dispatcher import Dispatcher
from supervisor.servers.endpoint import Endpoint
from tests.support import read_db


def job_config(tmp_path: Path, **sections: dict[str, Any]) -> JobConfig:
    data: dict[str, Any] = {"servers": {"count": 1, "model_path": "m"},
                            "dispatch": {"request_timeout_s": 30.0, "max_attempts": 3}}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return parse_config(data, base_dir=tmp_path)


def open_store(tmp_path: Path, rows: list[dict]) -> Store:
    store = Store.open(tmp_path / "job.db")
    store.import_batch([ImportRow(r["id"], r["messages"], i + 1) for i, r in enumerate(rows)])
    return store


def db_rows(tmp_path: Path, sql: str, *args: Any) -> list[tuple]:
    return read_db(tmp_path / "job.db", sql, *args)


async def wait_until(cond: Callable[[], Any], timeout_s: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if hasattr(value, "__await__"):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or cond}")
        await anyio.sleep(0.05)


@asynccontextmanager
async def dispatching(store: Store, config: JobConfig) -> AsyncIterator[tuple[Dispatcher, AsyncStore]]:
    astore = AsyncStore(store)
    d = Dispatcher(astore, config)
    async with d.running():
        yield d, astore


async def serve_until(d: Dispatcher, astore: AsyncStore, endpoint: Endpoint,
                      done: Callable[[Any], bool], timeout_s: float = 60.0) -> None:
    """Serve one endpoint until `done(counts)`, then drain and wait for serve() to return."""
    draining = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(d.serve, endpoint, draining)

        async def check() -> bool:
            return done(await astore.call(Store.counts))

        await wait_until(check, timeout_s, "dispatch to reach its goal")
        draining.set()
