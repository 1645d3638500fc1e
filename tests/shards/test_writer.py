"""Shard files: the line format, deterministic bytes, atomic writes, rewrites in place."""

from __future__ import annotations

import hashlib
import json

from state.records import Completion, Done
from state.store import Store
from supervisor.shards import writer as writer_module
from supervisor.shards.writer import ShardWriter, shard_bytes
from tests.fixtures.state_db import done, key_for, rows


def _finish(store: Store, n: int, t0: float = 100.0) -> list[str]:
    ids = [c.id for c in store.claim(n, "gpu0", 1.0)]
    store.record([done(pid, t0 + i / 8) for i, pid in enumerate(ids)])
    return ids


def test_line_format_and_order(tmp_path):
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(3))
        ids = [c.id for c in store.claim(3, "gpu0", 1.0)]
        store.record([Done(ids[2], Completion("Ünïcode answer", None, "length", 7, 9, 0), 9, "m",
                           "gpu1", 1.5, 2.25, loop=True)])
        store.record([done(ids[0], 3.0), done(ids[1], 2.0)])
        assert ShardWriter(store, tmp_path / "out", 10, key_for).sync(flush=True) == [1]
    text = (tmp_path / "out" / "shard-000001.jsonl").read_text(encoding="utf-8")
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) == 4                  # "\n" after every line
    objs = [json.loads(l) for l in lines[:-1]]
    assert [o["id"] for o in objs] == ["p0000", "p0001", "p0002"]   # by id, not finish order
    assert list(objs[2]) == ["id", "messages", "finish_reason", "loop", "usage", "max_tokens",
                             "model", "server", "attempt", "time"]
    assert [o["loop"] for o in objs] == [False, False, True]
    assert objs[2] == {
        "id": "p0002",
        "messages": [{"role": "user", "content": "question 2"},
                     {"role": "assistant", "content": "Ünïcode answer", "reasoning_content": None}],
        "finish_reason": "length",
        "loop": True,
        "usage": {"prompt_tokens": 7, "completion_tokens": 9, "reasoning_tokens": 0,
                  "total_tokens": 16},
        "max_tokens": 9, "model": "m", "server": "gpu1", "attempt": 1, "time": 2.25}
    assert "Ünïcode" in lines[2]                                 # not \u-escaped
    assert lines[0] == json.dumps(objs[0], ensure_ascii=False, separators=(",", ":"))


def test_shards_are_whole_until_flush_and_recorded_with_digests(tmp_path):
    out = tmp_path / "out"
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(25))
        writer = ShardWriter(store, out, 10, key_for)
        _finish(store, 25)
        assert writer.sync() == [1, 2]
        assert sorted(p.name for p in out.iterdir()) == ["shard-000001.jsonl",
                                                         "shard-000002.jsonl"]
        assert writer.sync() == []                              # nothing new
        assert writer.sync(flush=True) == [3]
        for shard in store.shards():
            data = (out / shard.key).read_bytes()
            assert shard.status == "written"
            assert (shard.records, shard.bytes) == (data.count(b"\n"), len(data))
            assert shard.sha256 == hashlib.sha256(data).hexdigest()
            assert shard.md5 == hashlib.md5(data).hexdigest()
        assert [s.id for s in store.shards_to_upload()] == [1, 2, 3]


def test_bytes_are_a_pure_function_of_the_rows(tmp_path):
    out = tmp_path / "out"
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(12))
        _finish(store, 12)
        ShardWriter(store, out, 5, key_for).sync(flush=True)
        first = {p.name: p.read_bytes() for p in out.iterdir()}
        for shard in store.shards():
            assert shard_bytes(store.shard_lines(shard.id)) == first[shard.key]


def test_partitioned_keys_and_orphan_tmp_files(tmp_path):
    out = tmp_path / "out"
    part = out / "part-0001-of-0004"
    part.mkdir(parents=True)
    (part / "shard-000009.jsonl.tmp").write_text("half a shard")
    (out / "unrelated.tmp").write_text("not ours")

    def key(seq: int) -> str:
        return f"part-0001-of-0004/shard-{seq:06d}.jsonl"

    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(4))
        _finish(store, 4)
        assert ShardWriter(store, out, 4, key).sync() == [1]
    assert sorted(p.name for p in part.iterdir()) == ["shard-000001.jsonl"]
    assert (out / "unrelated.tmp").exists()


def test_a_regenerated_prompt_rewrites_its_shard_for_reupload(tmp_path):
    out = tmp_path / "out"
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(6))
        ids = [c.id for c in store.claim(6, "gpu0", 1.0)]
        store.record([done(pid, 10.0 + i, finish="length" if i == 4 else "stop", max_tokens=50)
                      for i, pid in enumerate(ids)])
        writer = ShardWriter(store, out, 3, key_for)
        assert writer.sync() == [1, 2]
        store.mark_shard_uploaded(2, "e", "c", 20.0)
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        assert store.requeue_truncated(100) == 1
        assert writer.sync() == []                  # the old line stays until the new one lands
        [c] = store.claim(1, "gpu0", 30.0)
        store.record([done(c.id, 31.0, max_tokens=100, content="complete now")])
        assert writer.sync() == [2]
        assert store.shard(2).status == "written"   # goes out again
        after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after["shard-000001.jsonl"] == before["shard-000001.jsonl"]
    lines = [json.loads(l) for l in after["shard-000002.jsonl"].splitlines()]
    assert [l["id"] for l in lines] == ids[3:]      # same members, one line each
    changed = [l for l in lines if l["id"] == ids[4]][0]
    assert changed["messages"][-1]["content"] == "complete now"
    assert (changed["attempt"], changed["max_tokens"], changed["finish_reason"]) == (2, 100, "stop")


def test_a_shard_is_written_a_few_lines_at_a_time_with_the_same_bytes(tmp_path):
    """Rows are read LINES_PER_READ at a time (memory: never a whole shard's answers), and
    the file, its size and digests are those of the whole shard's lines at once."""
    out = tmp_path / "out"
    per_read = writer_module.LINES_PER_READ
    sizes = [2 * per_read, 2 * per_read + 23]      # an exact multiple, and a partial last read
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(sum(sizes)))
        _finish(store, sizes[0])
        assert ShardWriter(store, out, sizes[0], key_for).sync() == [1]
        _finish(store, sizes[1], t0=200.0)
        assert ShardWriter(store, out, sizes[1], key_for).sync() == [2]
        for shard, size in zip(store.shards(), sizes):
            data = (out / shard.key).read_bytes()
            assert data == shard_bytes(store.shard_lines(shard.id))
            assert (shard.records, shard.bytes) == (size, len(data))
            assert shard.sha256 == hashlib.sha256(data).hexdigest()
            assert shard.md5 == hashlib.md5(data).hexdigest()


def test_a_line_regenerated_between_two_reads_gets_its_shard_written_again(tmp_path):
    """The file is read in batches: a result that lands after the first batch was read makes
    that file stale, so the shard is not marked written, and the next sync writes it whole."""
    out = tmp_path / "out"
    per_read = writer_module.LINES_PER_READ
    n = per_read + 5
    with Store.open(tmp_path / "job.db") as store:
        store.import_batch(rows(n))
        ids = [c.id for c in store.claim(n, "gpu0", 1.0)]
        store.record([done(pid, 10.0 + i, finish="length" if i == 0 else "stop",
                           max_tokens=50) for i, pid in enumerate(ids)])
        writer = ShardWriter(store, out, n, key_for)
        assert writer.sync() == [1]
        # Regenerated once (still cut off): the shard is to be written again...
        assert store.requeue_truncated(100) == 1
        [c] = store.claim(1, "gpu0", 30.0)
        store.record([done(c.id, 31.0, finish="length", max_tokens=100)])
        assert store.shard(1).status == "assigned"
        batches = store.shard_line_batches

        def regenerated_after_the_first_batch(shard_id: int, size: int,
                                              output_ids: bool = False):
            # ...and again while that write has read its first batch.
            for k, batch in enumerate(batches(shard_id, size, output_ids)):
                yield batch
                if k == 0:
                    assert store.requeue_truncated(200) == 1
                    [c] = store.claim(1, "gpu0", 40.0)
                    store.record([done(c.id, 41.0, max_tokens=200, content="complete now")])

        store.shard_line_batches = regenerated_after_the_first_batch  # type: ignore[method-assign]
        assert writer.sync() == []                  # written, but stale: not marked
        assert store.shard(1).status == "assigned"
        del store.shard_line_batches
        assert writer.sync() == [1]
        data = (out / store.shard(1).key).read_bytes()
        assert data == shard_bytes(store.shard_lines(1))
        assert b"complete now" in data
