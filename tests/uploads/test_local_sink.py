"""The local-directory sink, and the S3 sink without credentials."""

from __future__ import annotations

import pytest

from supervisor.config import UploadsSection
from supervisor.uploads.local_sink import LocalDirSink
from supervisor.uploads.s3_client import S3Location
from supervisor.uploads.s3_sink import S3Sink
from supervisor.uploads.sink import FatalUploadError, ShardBlob, TransientUploadError


def test_in_place_output_is_checked_never_copied_or_removed(tmp_path):
    sink = LocalDirSink(tmp_path / "out", tmp_path / "out")
    assert sink.in_place and not sink.removes_local and not sink.remote
    receipt = sink.put(ShardBlob.of("shard-000001.jsonl", b'{"id":"a"}\n'))
    assert receipt.verified_by == "local-digest" and receipt.etag is None
    assert not (tmp_path / "out").exists()                  # nothing written


def test_another_directory_gets_an_atomic_copy_read_back(tmp_path):
    sink = LocalDirSink(tmp_path / "dest", tmp_path / "spool")
    assert sink.removes_local
    blob = ShardBlob.of("part-0001-of-0002/shard-000001.jsonl", b'{"id":"a"}\n')
    assert sink.put(blob).checksum == f"sha256:{blob.sha256}"
    assert (tmp_path / "dest" / blob.key).read_bytes() == blob.data
    assert not list((tmp_path / "dest").rglob("*.tmp"))


def test_an_unwritable_destination_is_transient(tmp_path):
    (tmp_path / "dest").write_text("a file where the directory should be")
    sink = LocalDirSink(tmp_path / "dest", tmp_path / "spool")
    with pytest.raises(TransientUploadError):
        sink.put(ShardBlob.of("shard-000001.jsonl", b"x\n"))


def test_no_credentials_anywhere_is_fatal_and_says_where_to_put_them(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    # Nothing listens here; the credentials are missing before any request is made.
    sink = S3Sink(S3Location.parse("s3://some-bucket/x/"),
                  UploadsSection(endpoint_url="http://127.0.0.1:9", timeout_s=1.0))
    with pytest.raises(FatalUploadError, match="no usable AWS credentials"):
        sink.put(ShardBlob.of("shard-000001.jsonl", b"x\n"))
