"""The uploader on a real store and real shard files, with the fake sink: what gets marked
uploaded (only what was verified), the backlog through failures, stops, and rewrites."""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from pathlib import Path

import anyio

from state.async_store import AsyncStore
from state.records import ImportRow
from state.store import Store
from supervisor.uploads.backoff import Backoff
from supervisor.uploads.fake_sink import FakeSink
from supervisor.uploads.sink import CorruptUploadError, FatalUploadError, TransientUploadError
from supervisor.uploads.uploader import Uploader
from tests.fixtures import waiting
from tests.fixtures.state_db import finish_prompts, store_with_shards

FAST = Backoff(0.01, 0.05)

# These uploaders retry within 0.05 s (FAST): a failing put's window is short, so it is
# looked at often, or the next put has begun before the wait sees this one end.
until = functools.partial(waiting.until, poll_s=0.01)


def uploader(store: Store, sink: FakeSink, spool: Path, **kwargs: object) -> Uploader:
    kwargs.setdefault("backoff", FAST)
    kwargs.setdefault("idle_interval_s", 0.05)
    return Uploader(AsyncStore(store), sink, spool, **kwargs)  # type: ignore[arg-type]


def kinds(store: Store) -> list[str]:
    return [e.kind for e in store.recent_events(100)]


async def test_drain_uploads_every_shard_verified_and_removes_the_spool_copies(tmp_path):
    store, _, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 23, 5)
    sink = FakeSink()
    up = uploader(store, sink, spool)
    assert await up.drain(10)
    shards = store.shards()
    assert len(shards) == 5 and all(s.status == "uploaded" for s in shards)
    for s in shards:
        assert sink.objects[s.key]                              # what the sink holds
        assert s.checksum == f"sha256:{s.sha256}" and s.etag == s.md5
    assert not list(spool.glob("*.jsonl"))
    st = up.status()
    assert (st.backlog_shards, st.uploaded_shards) == (0, 5)
    assert st.uploaded_bytes == sum(s.bytes for s in shards)
    assert st.last_success_at is not None and st.bytes_per_s > 0
    assert sink.prepared == {s.key for s in shards}


async def test_keep_local_keeps_the_spool_copies(tmp_path):
    store, _, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 10, 5)
    assert await uploader(store, FakeSink(), spool, keep_local=True).drain(10)
    assert len(list(spool.glob("*.jsonl"))) == 2


async def test_a_sink_that_is_the_destination_never_loses_its_files(tmp_path):
    store, _, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 10, 5)
    assert await uploader(store, FakeSink(removes_local=False), spool).drain(10)
    assert len(list(spool.glob("*.jsonl"))) == 2


async def test_transient_failures_keep_the_backlog_then_it_drains(tmp_path):
    store, _, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 15, 5)
    down = [TransientUploadError(f"put: EndpointConnectionError #{i}") for i in range(4)]
    sink = FakeSink(failures=list(down))
    sink.gate = threading.Event()
    up = uploader(store, sink, spool, concurrency=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(up.run)
        seen = []
        for _ in range(4):                       # let each failing put through, one by one
            await until(lambda: sink.active == 1, "a put in flight")
            seen.append(up.status())
            sink.gate.set()
            await until(lambda: sink.active == 0, "the put ended")
            sink.gate.clear()
        await until(lambda: up.consecutive_failures == 4, "four failures counted")
        st = up.status()
        assert st.backlog_shards == 3 and st.backlog_bytes > 0 and st.uploaded_shards == 0
        assert "EndpointConnectionError #3" in (st.last_error or "")
        assert all(s.status == "written" for s in store.shards())     # nothing marked
        sink.gate.set()
        # All three counted: the uploader refreshes the backlog and the uploaded totals one
        # after the other, so a status between the two can show the backlog empty with the
        # last shard not yet counted.
        await until(lambda: up.status().backlog_shards == 0 and up.status().in_flight == 0
                    and up.status().uploaded_shards == 3, "the backlog drained")
        tg.cancel_scope.cancel()
    assert [s.in_flight for s in seen] == [1, 1, 1, 1]
    assert up.consecutive_failures == 0 and up.status().uploaded_shards == 3
    assert sum(s.upload_attempts for s in store.shards()) == 4
    assert all(s.last_error is None for s in store.shards())
    assert {"uploads_failing", "uploads_recovered"} <= set(kinds(store))


async def test_a_shard_that_keeps_failing_does_not_hold_up_the_others(tmp_path):
    store, _, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 15, 5)
    first = store.shards()[0].key
    sink = FakeSink()
    sink.on_put = lambda blob: (_ for _ in ()).throw(
        TransientUploadError("that one key is refused")) if blob.key == first else None
    up = uploader(store, sink, spool, concurrency=1)
    assert not await up.drain(1.0)         # that one never goes; the drain gives up on it
    uploaded = {s.key for s in store.shards() if s.status == "uploaded"}
    assert uploaded == {s.key for s in store.shards()} - {first}


async def test_a_fatal_error_stops_uploads_marks_nothing_and_keeps_the_files(tmp_path):
    store, _, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 10, 5)
    sink = FakeSink(failures=[FatalUploadError("put: NoSuchBucket (HTTP 404): no bucket")])
    up = uploader(store, sink, spool, concurrency=1)
    assert not await up.drain(10)
    assert len(sink.puts) == 1                               # no second try
    st = up.status()
    assert st.stopped and "NoSuchBucket" in st.stopped and st.backlog_shards == 2
    assert all(s.status == "written" for s in store.shards())
    assert len(list(spool.glob("*.jsonl"))) == 2
    [event] = [e for e in store.recent_events(100) if e.kind == "uploads_stopped"]
    assert "NoSuchBucket" in event.detail["reason"]


async def test_a_corrupt_upload_is_recorded_and_uploaded_again(tmp_path):
    store, _, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 5, 5)
    sink = FakeSink(failures=[CorruptUploadError("holds sha256 0000…")])
    up = uploader(store, sink, spool)
    assert await up.drain(10)
    assert len(sink.puts) == 2 and up.status().corrupt_total == 1
    assert "upload_corrupt" in kinds(store)
    assert store.shards()[0].status == "uploaded"


async def test_a_missing_spool_file_is_rebuilt_by_the_writer_then_uploaded(tmp_path):
    store, writer, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 10, 5)
    [first, second] = store.shards()
    original = (spool / first.key).read_bytes()
    (spool / first.key).unlink()
    (spool / second.key).write_bytes(b"damaged\n")
    sink = FakeSink()
    up = uploader(store, sink, spool)
    await up.drain(10)
    assert sink.puts == []                                   # neither bad file went out
    assert [s.status for s in store.shards()] == ["assigned", "assigned"]
    await anyio.to_thread.run_sync(writer.sync)
    assert await up.drain(10)
    assert sink.objects[first.key] == original
    assert all(s.status == "uploaded" for s in store.shards())


async def test_a_shard_rewritten_during_its_upload_is_not_marked_and_goes_out_again(tmp_path):
    store, writer, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 5, 5)
    shard = store.shards()[0]
    sink = FakeSink()

    def regenerate_one(blob: object) -> None:
        # A requeued prompt's new result lands while the old bytes are on their way.
        sink.on_put = None
        store.requeue_ids(["p00002"])
        finish_prompts(store, ["p00002"], time.time())
        writer.sync()

    sink.on_put = regenerate_one
    up = uploader(store, sink, spool)
    assert await up.drain(10)
    assert len(sink.puts) == 2
    after = store.shards()[0]
    assert after.status == "uploaded" and after.sha256 != shard.sha256
    assert hashlib.sha256(sink.objects[shard.key]).hexdigest() == after.sha256
    assert after.checksum == f"sha256:{after.sha256}"


async def test_uploads_run_at_most_concurrency_at_a_time(tmp_path):
    store, _, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 40, 4)
    sink = FakeSink()
    sink.gate = threading.Event()
    up = uploader(store, sink, spool, concurrency=3)
    async with anyio.create_task_group() as tg:
        tg.start_soon(up.run)
        await until(lambda: sink.active == 3, "three puts in flight")
        assert up.status().in_flight == 3
        await anyio.sleep(0.2)                 # a few idle ticks: still no fourth
        assert sink.active == 3 and sink.max_active == 3
        sink.gate.set()
        await until(lambda: up.status().uploaded_shards == 10, "all uploaded")
        tg.cancel_scope.cancel()
    assert sink.max_active == 3


async def test_a_poke_starts_an_upload_without_waiting_for_the_idle_tick(tmp_path):
    store, writer, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 5, 5)
    sink = FakeSink()
    up = uploader(store, sink, spool, idle_interval_s=3600.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(up.run)
        await until(lambda: len(sink.objects) == 1, "the first shard")
        store.import_batch([ImportRow(f"q{i}", [{"role": "user", "content": "q"}], i)
                            for i in range(5)])
        finish_prompts(store, [f"q{i}" for i in range(5)], time.time() + 10)
        await anyio.to_thread.run_sync(writer.sync)
        up.poke()
        await until(lambda: len(sink.objects) == 2, "the poked shard")
        tg.cancel_scope.cancel()


async def test_a_restart_removes_spool_copies_of_shards_already_uploaded(tmp_path):
    store, _, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 10, 5)
    first = store.shards()[0]
    # A daemon killed between marking the shard uploaded and deleting its spool file.
    store.mark_shard_uploaded(first.id, first.md5, f"sha256:{first.sha256}", time.time())
    assert (spool / first.key).exists()
    sink = FakeSink()
    assert await uploader(store, sink, spool).drain(10)
    assert sink.puts == [store.shards()[1].key]
    assert not list(spool.glob("*.jsonl"))


def test_backoff_doubles_to_its_cap_with_at_least_half_of_each_step():
    b = Backoff(1.0, 8.0)
    assert [b.step(n) for n in range(6)] == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert b.delay(3, rng=lambda: 0.0) == 2.0 and b.delay(3, rng=lambda: 0.999) < 4.0
    assert b.step(10_000) == 8.0



async def test_a_job_ending_as_a_put_completes_still_marks_it_and_removes_the_copy(tmp_path):
    store, _, spool = await anyio.to_thread.run_sync(store_with_shards, tmp_path, 5, 5)
    sink = FakeSink()
    up = uploader(store, sink, spool)
    async with anyio.create_task_group() as tg:
        # The job's end (its task group cancelled) lands while the bytes are on their way.
        sink.on_put = lambda blob: anyio.from_thread.run_sync(tg.cancel_scope.cancel)
        tg.start_soon(up.run)
    [shard] = store.shards()
    assert shard.status == "uploaded" and sink.objects[shard.key]
    assert not (spool / shard.key).exists()
