"""A state DB bigger than S3's multipart threshold goes up in parts, mapped from the file
rather than read into memory, is verified by its part ETags, and restores byte for byte."""

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
                         interval_s=0, single_part_limit=uploads.multipart_threshold_bytes)
    manifest = backup.backup_sync()
    assert manifest.db_bytes > 5 * MIB
    head = s3.head_object(Bucket=bucket, Key="job/" + manifest.db_key)
    assert head["ETag"].strip('"').endswith("-2")       # went up in two parts
    target = tmp_path / "restored" / "job.db"
    assert restore_if_missing(S3Reader(location, uploads), me, target) == manifest
    assert hashlib.sha256(target.read_bytes()).hexdigest() == manifest.db_sha256
