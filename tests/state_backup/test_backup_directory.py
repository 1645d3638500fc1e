"""State backups on a real store into a real directory: keys, pruning, a round trip through
restore, and the refusals (tampered copy, another partition, another prompt file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from state.records import ImportRow
from state.settings_keys import Setting
from state.db_copy import CopyError, inspect
from state.store import Store
from supervisor.config import Partition
from supervisor.shards.keys import shard_key_for
from supervisor.shards.keys import ShardKey, parse_shard_key
from supervisor.state_backup.keys import manifest_key
from supervisor.state_backup.backup import StateBackup
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
                       interval_s=0, single_part_limit=1024)   # small: the mmap path too


def test_round_trip_keeps_one_previous_copy_and_restores_the_latest(tmp_path: Path):
    db = tmp_path / "node" / "job.db"
    db.parent.mkdir()
    store = _store(db)
    backup = _backup(tmp_path, db)
    first = backup.backup_sync()
    store.import_batch([ImportRow("late", [{"role": "user", "content": "x"}], 99)])
    backup.backup_sync()
    last = backup.backup_sync()
    store.close()
    copies = sorted(p.name for p in (tmp_path / "out" / "part-0001-of-0003" / "_state").glob("*.db"))
    assert len(copies) == 2 and first.db_key.rsplit("/", 1)[1] not in copies
    reader = DirectoryReader(tmp_path / "out")
    got = BackupManifest.from_bytes(reader.read_bytes(manifest_key(PART)), "m")
    assert got == last and got.total == 21
    target = tmp_path / "new-node" / "job.db"
    assert restore_if_missing(reader, ME, target) == last
    assert inspect(target).total == 21 and inspect(target).partition == "1/3"
    # An existing DB is never replaced.
    assert restore_if_missing(reader, ME, target) is None


def test_restore_refuses_a_tampered_copy_and_leaves_nothing(tmp_path: Path):
    db = tmp_path / "node" / "job.db"
    db.parent.mkdir()
    _store(db).close()
    m = _backup(tmp_path, db).backup_sync()
    copy = tmp_path / "out" / m.db_key
    data = bytearray(copy.read_bytes())
    data[-10] ^= 0xFF
    copy.write_bytes(bytes(data))
    target = tmp_path / "new" / "job.db"
    with pytest.raises(RestoreRefused, match="are not the backup's"):
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
