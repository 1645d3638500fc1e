"""A state DB backed up to S3 as chunks: each verified, only the changed ones sent again, and
the whole restored byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from state.records import ImportRow
from state.settings_keys import Setting
from state.store import Store
from supervisor.config import Partition, UploadsSection
from supervisor.state_backup.backup import StateBackup
from supervisor.state_backup.restore import NodeIdentity, restore_if_missing
from supervisor.uploads.output_reader import S3Reader
from supervisor.uploads.s3_client import S3Location
from supervisor.uploads.s3_sink import S3Sink
from tests.fixtures.moto_s3 import MotoServer

MIB = 1024 * 1024


def test_a_multipart_backup_round_trip(tmp_path: Path, moto: MotoServer, s3: Any, bucket: str):
    me = NodeIdentity(Partition(0, 2), "c" * 64, "prompts.jsonl")
    db = tmp_path / "job.db"
    store = Store.open(db)
    # ~8 MB of prompts: over a 5 MiB threshold, so two parts.
    store.import_batch([ImportRow(f"big{i}", [{"role": "user", "content": f"{i} " + "x" * 10_000}],
                                  i) for i in range(800)])
    store.set_setting(Setting.JOB_PARTITION, "0/2")
    store.set_setting(Setting.PROMPTS_SHA256, me.prompts_sha256)
    store.close()
    uploads = UploadsSection(endpoint_url=moto.url, multipart_threshold_bytes=5 * MIB,
                             multipart_part_bytes=5 * MIB)
    location = S3Location.parse(f"s3://{bucket}/job/")
    backup = StateBackup(db, S3Sink(location, uploads), S3Reader(location, uploads), me,
                         interval_s=0)
    first = backup.backup_sync()
    assert first.db_bytes > 5 * MIB and len(first.chunks) == -(-first.db_bytes // MIB)
    store = Store.open(db)
    store.import_batch([ImportRow("late", [{"role": "user", "content": "x"}], 900)])
    store.close()
    manifest = backup.backup_sync()
    # The header page, the table's last leaf and two index pages: 4 of 9 chunks.
    assert backup.last_sent is not None and 0 < backup.last_sent.chunks <= 4 < len(manifest.chunks)
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="job/")["Contents"]}
    assert {f"job/part-0000-of-0002/_state/chunks/{c}" for c in manifest.chunks} <= listed
    target = tmp_path / "restored" / "job.db"
    assert restore_if_missing(S3Reader(location, uploads), me, target) == manifest
    assert hashlib.sha256(target.read_bytes()).hexdigest() == manifest.db_sha256
