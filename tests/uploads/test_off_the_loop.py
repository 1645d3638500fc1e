"""Uploads never block the event loop: a whole drain into moto with blockbuster watching
(any blocking call — file I/O, a socket, statvfs — made on the loop fails the test)."""

from __future__ import annotations

import anyio
from blockbuster import blockbuster_ctx

from state.async_store import AsyncStore
from supervisor.config import UploadsSection
from supervisor.uploads.disk_guard import DiskGuard
from supervisor.uploads.s3_client import S3Location
from supervisor.uploads.s3_sink import S3Sink
from supervisor.uploads.uploader import Uploader
from tests.fixtures.moto_s3 import objects
from tests.fixtures.state_db import store_with_shards


async def test_a_drain_and_the_disk_guard_make_no_blocking_call_on_the_loop(tmp_path, moto, s3,
                                                                             bucket):
    store, _, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 12, 5)
    sink = S3Sink(S3Location.parse(f"s3://{bucket}/loop/"),
                  UploadsSection(endpoint_url=moto.url, timeout_s=5.0))
    up = Uploader(AsyncStore(store), sink, spool, idle_interval_s=0.05)
    guard = DiskGuard(spool, 1, interval_s=0.01)
    with blockbuster_ctx():
        async with anyio.create_task_group() as tg:
            tg.start_soon(guard.run)
            assert await up.drain(30)
            assert up.status().uploaded_shards == 3 and guard.paused_reason() is None
            tg.cancel_scope.cancel()
    assert len(objects(s3, bucket, "loop/")) == 3
    assert guard.last_free is not None
