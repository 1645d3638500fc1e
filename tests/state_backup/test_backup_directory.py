"""State backups on a real store into a real directory: keys, pruning, a round trip through
restore, and the refusals (tampered copy, another partition, another prompt file)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from state.db_copy import CopyError, inspect
from state.records import ImportRow
from state.settings_keys import Setting
from state.store import Store
from supervisor.config import Partition
from supervisor.shards.keys import ShardKey, parse_shard_key, shard_key_for
from supervisor.state_backup.backup import StateBackup
from supervisor.state_backup.keys import manifest_key
from supervisor.state_backup.manifest import BackupManifest
from supervisor.state_backup.restore import NodeIdentity, RestoreRefused, restore_if_missing
from supervisor.uploads.local_sink import LocalDirSink
from supervisor.uploads.output_reader import DirectoryReader

PART = Partition(1, 3)
ME = NodeIdentity(PART, "a" * 64, "prompts.jsonl")


@pytest.mark.parametrize("partition", [None, Partition(3, 8)])
def test_shard_keys_read_back_as_the_job_writes_them(partition):
    key = shard_key_for(partition)(42)
    assert parse_shard_key(key) == ShardKey(partition, 42, key)


@pytest.mark.parametrize("key", ["part-0001-of-0003/_state/backup.json", "shard-000001.jsonl.tmp",
                                 "part-0003-of-0003/shard-000001.jsonl", "notes.txt"])
def test_other_keys_are_not_shards(key):
    assert parse_shard_key(key) is None


def _store(path: Path, me: NodeIdentity = ME) -> Store:
    store = Store.open(path)
    store.import_batch([ImportRow(f"id{i}", [{"role": "user", "content": f"q{i}"}], i)
                        for i in range(20)])
    store.set_setting(Setting.JOB_PARTITION, me.partition_text or "")
    store.set_setting(Setting.PROMPTS_SHA256, me.prompts_sha256)
    return store


def _backup(tmp_path: Path, db: Path, me: NodeIdentity = ME) -> StateBackup:
    out = tmp_path / "out"
    return StateBackup(db, LocalDirSink(out, db.parent), DirectoryReader(out), me,
                       interval_s=0, chunk_bytes=8192)   # small: a few chunks of two pages


def _chunks(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "out" / "part-0001-of-0003" / "_state" / "chunks").iterdir()}


def test_round_trip_keeps_the_previous_chunks_and_restores_the_latest(tmp_path: Path):
    db = tmp_path / "node" / "job.db"
    db.parent.mkdir()
    store = _store(db)
    backup = _backup(tmp_path, db)
    first = backup.backup_sync()
    assert backup.last_sent is not None and backup.last_sent.chunks == len(set(first.chunks)) > 1
    store.import_batch([ImportRow("late", [{"role": "user", "content": "x"}], 99)])
    second = backup.backup_sync()
    # Only the chunks whose pages changed went up again.
    assert 0 < backup.last_sent.chunks < len(second.chunks)
    store.import_batch([ImportRow("later", [{"role": "user", "content": "y"}], 100)])
    last = backup.backup_sync()
    store.close()
    assert _chunks(tmp_path) == set(second.chunks) | set(last.chunks)
    assert set(first.chunks) - _chunks(tmp_path)    # the one before the previous is gone
    reader = DirectoryReader(tmp_path / "out")
    got = BackupManifest.from_bytes(reader.read_bytes(manifest_key(PART)), "m")
    assert got == last and got.total == 22 and got.format == 2
    target = tmp_path / "new-node" / "job.db"
    assert restore_if_missing(reader, ME, target) == last
    assert inspect(target).total == 22 and inspect(target).partition == "1/3"
    assert hashlib.sha256(target.read_bytes()).hexdigest() == last.db_sha256
    # An existing DB is never replaced.
    assert restore_if_missing(reader, ME, target) is None


def test_an_unchanged_db_sends_only_its_manifest(tmp_path: Path):
    db = tmp_path / "node" / "job.db"
    db.parent.mkdir()
    _store(db).close()
    backup = _backup(tmp_path, db)
    first = backup.backup_sync()
    second = backup.backup_sync()
    assert second.chunks == first.chunks and backup.last_sent is not None
    assert backup.last_sent.chunks == 0 and backup.last_sent.bytes == len(second.to_bytes())


def test_a_format_1_backup_still_restores_and_is_pruned_after_the_next(tmp_path: Path):
    """A node backed up by the version before chunks: one object at db_key."""
    db = tmp_path / "node" / "job.db"
    db.parent.mkdir()
    _store(db).close()
    out = tmp_path / "out"
    m = _backup(tmp_path, db).backup_sync()
    reader = DirectoryReader(out)
    whole = tmp_path / "whole.db"
    restore_if_missing(reader, ME, whole)
    key = "part-0001-of-0003/_state/job-000000000000001.db"
    (out / key).write_bytes(whole.read_bytes())
    old = replace(m, db_key=key, chunks=(), chunk_bytes=0, format=1)
    (out / manifest_key(PART)).write_bytes(old.to_bytes())
    target = tmp_path / "new" / "job.db"
    assert restore_if_missing(reader, ME, target) == replace(old, chunks=())
    assert inspect(target).total == 20
    backup = _backup(tmp_path, db)
    backup.backup_sync()
    assert (out / key).exists()             # the previous backup's copy is kept once
    backup.backup_sync()
    assert not (out / key).exists()


@pytest.mark.parametrize("damage, message", [("flip", "not the backup's"),
                                             ("delete", "a chunk of the backup .* is missing")])
def test_restore_refuses_a_tampered_copy_and_leaves_nothing(tmp_path: Path, damage, message):
    db = tmp_path / "node" / "job.db"
    db.parent.mkdir()
    _store(db).close()
    m = _backup(tmp_path, db).backup_sync()
    chunk = tmp_path / "out" / "part-0001-of-0003" / "_state" / "chunks" / m.chunks[-1]
    if damage == "flip":
        data = bytearray(chunk.read_bytes())
        data[-10] ^= 0xFF
        chunk.write_bytes(bytes(data))
    else:
        chunk.unlink()
    target = tmp_path / "new" / "job.db"
    with pytest.raises(RestoreRefused, match=message):
        restore_if_missing(DirectoryReader(tmp_path / "out"), ME, target)
    assert list(target.parent.iterdir()) == []


@pytest.mark.parametrize("other, message", [
    (NodeIdentity(Partition(2, 3), "a" * 64, "prompts.jsonl"), None),     # looks elsewhere
    (NodeIdentity(PART, "b" * 64, "prompts.jsonl"), "made from another prompt file"),
])
def test_restore_only_takes_its_own_partition_and_prompt_file(tmp_path: Path, other, message):
    db = tmp_path / "node" / "job.db"
    db.parent.mkdir()
    _store(db).close()
    _backup(tmp_path, db).backup_sync()
    reader = DirectoryReader(tmp_path / "out")
    if message is None:
        assert restore_if_missing(reader, other, tmp_path / "n" / "job.db") is None
    else:
        with pytest.raises(RestoreRefused, match=message):
            restore_if_missing(reader, other, tmp_path / "n" / "job.db")


def test_a_damaged_db_file_is_not_a_snapshot(tmp_path: Path):
    bad = tmp_path / "x.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    with pytest.raises(CopyError):
        inspect(bad)
