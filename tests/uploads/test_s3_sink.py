"""The S3 sink against moto's real HTTP server (and a fault proxy in front of it): what is
sent, what is checked, and how each failure is classified."""

from __future__ import annotations

import hashlib
import os

import pytest

from supervisor.config import UploadsSection
from supervisor.uploads.s3_client import S3Location
from supervisor.uploads.s3_sink import S3Sink, multipart_etag
from supervisor.uploads.sink import (
    CorruptUploadError,
    FatalUploadError,
    ShardBlob,
    TransientUploadError,
)
from tests.fixtures.moto_s3 import objects
from tests.fixtures.ports import free_port

MiB = 1024 * 1024


def sink_for(endpoint: str, bucket: str, prefix: str = "run/", **uploads: object) -> S3Sink:
    settings = UploadsSection(endpoint_url=endpoint, **{"timeout_s": 5.0, **uploads})  # type: ignore[arg-type]
    return S3Sink(S3Location.parse(f"s3://{bucket}/{prefix}"), settings)


def blob(key: str = "shard-000001.jsonl", size: int = 4096) -> ShardBlob:
    line = b'{"id":"p1","messages":[]}\n'
    return ShardBlob.of(key, (line * (size // len(line) + 1))[:size])


def test_location_parsing():
    assert S3Location.parse("s3://b/x/y/") == S3Location("b", "x/y/")
    assert S3Location.parse("s3://b/x") == S3Location("b", "x/")
    assert S3Location.parse("s3://b") == S3Location("b", "")
    assert S3Location.parse("s3://b/x/").key("part-0001-of-0002/shard-000001.jsonl") == \
        "x/part-0001-of-0002/shard-000001.jsonl"
    with pytest.raises(ValueError):
        S3Location.parse("s3:///x")


def test_single_put_is_verified_by_etag_and_a_reupload_overwrites_the_same_key(moto, s3, bucket):
    sink = sink_for(moto.url, bucket)
    b = blob()
    receipt = sink.put(b)
    assert receipt.verified_by == "etag"
    assert receipt.etag == b.md5
    assert receipt.checksum == f"sha256:{b.sha256}"
    again = sink.put(b)
    assert again.etag == receipt.etag
    listed = objects(s3, bucket)
    assert list(listed) == ["run/shard-000001.jsonl"]
    assert s3.get_object(Bucket=bucket, Key="run/shard-000001.jsonl")["Body"].read() == b.data


def test_large_shard_goes_multipart_and_is_verified_by_its_part_digests(moto, s3, bucket):
    sink = sink_for(moto.url, bucket, multipart_threshold_bytes=5 * MiB,
                    multipart_part_bytes=5 * MiB)
    b = ShardBlob.of("shard-000002.jsonl", os.urandom(11 * MiB))
    receipt = sink.put(b)
    assert receipt.verified_by == "part-etags"
    assert receipt.parts == 3
    parts = [b.data[i:i + 5 * MiB] for i in range(0, b.size, 5 * MiB)]
    assert receipt.etag == multipart_etag([hashlib.md5(p).digest() for p in parts])
    body = s3.get_object(Bucket=bucket, Key="run/shard-000002.jsonl")["Body"].read()
    assert hashlib.sha256(body).hexdigest() == b.sha256


def test_bytes_altered_on_the_way_are_caught_then_the_next_put_is_whole(moto, s3, bucket,
                                                                        fault_proxy):
    proxy = fault_proxy()
    proxy.corrupt_puts = 1
    sink = sink_for(proxy.url, bucket)
    b = blob(size=100_000)
    with pytest.raises(CorruptUploadError, match="sha256"):
        sink.put(b)
    assert proxy.corrupted == 1
    # moto took the damaged bytes without a word: the daemon's own check is what caught it.
    stored = s3.get_object(Bucket=bucket, Key="run/shard-000001.jsonl")["Body"].read()
    assert stored != b.data and len(stored) == b.size
    assert sink.put(b).verified_by == "etag"
    assert s3.get_object(Bucket=bucket, Key="run/shard-000001.jsonl")["Body"].read() == b.data


def test_a_damaged_part_fails_the_multipart_upload_and_it_is_aborted(moto, s3, bucket,
                                                                     fault_proxy):
    proxy = fault_proxy()
    proxy.corrupt_puts = 1
    sink = sink_for(proxy.url, bucket, multipart_threshold_bytes=5 * MiB,
                    multipart_part_bytes=5 * MiB, sha256_checksum=False)
    b = ShardBlob.of("shard-000003.jsonl", os.urandom(6 * MiB))
    with pytest.raises(CorruptUploadError, match="part 1"):
        sink.put(b)
    assert "run/shard-000003.jsonl" not in objects(s3, bucket)
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert sink.put(b).verified_by == "part-etags"


def test_an_etag_that_is_not_an_md5_is_settled_by_reading_the_object_back(moto, bucket,
                                                                          fault_proxy):
    proxy = fault_proxy()
    proxy.fake_etags = 1
    receipt = sink_for(proxy.url, bucket).put(blob())
    assert receipt.verified_by == "read-back"
    assert receipt.etag == "not-an-md5-etag"


def test_a_missing_bucket_is_fatal_and_says_so(moto):
    with pytest.raises(FatalUploadError, match="NoSuchBucket"):
        sink_for(moto.url, "no-such-bucket-here").put(blob())


def test_access_denied_is_fatal(moto, bucket, fault_proxy):
    proxy = fault_proxy()
    proxy.fail_next = [(403, "AccessDenied")]
    with pytest.raises(FatalUploadError, match="AccessDenied"):
        sink_for(proxy.url, bucket).put(blob())


@pytest.mark.parametrize("status,code", [(503, "SlowDown"), (500, "InternalError")])
def test_throttling_and_5xx_beyond_botocores_retries_are_transient(moto, bucket, fault_proxy,
                                                                   status, code):
    proxy = fault_proxy()
    proxy.fail_next = [(status, code)] * 3          # every attempt botocore makes
    with pytest.raises(TransientUploadError, match=code) as info:
        sink_for(proxy.url, bucket).put(blob())
    assert not isinstance(info.value, CorruptUploadError)


def test_a_blip_within_botocores_retries_goes_through(moto, s3, bucket, fault_proxy):
    proxy = fault_proxy()
    proxy.fail_next = [(503, "SlowDown")]
    assert sink_for(proxy.url, bucket).put(blob()).verified_by == "etag"


def test_connection_refused_is_transient():
    sink = sink_for(f"http://127.0.0.1:{free_port()}", "any-bucket", timeout_s=1.0)
    with pytest.raises(TransientUploadError, match="EndpointConnectionError|connect"):
        sink.put(blob())


def test_a_store_that_does_not_answer_in_time_is_transient(moto, bucket, fault_proxy):
    proxy = fault_proxy()
    proxy.delay_s = 1.5
    with pytest.raises(TransientUploadError, match="Timeout|timed out"):
        sink_for(proxy.url, bucket, timeout_s=0.3).put(blob())


def test_prepare_aborts_open_multipart_uploads_of_own_keys_only(moto, s3, bucket):
    mine = s3.create_multipart_upload(Bucket=bucket, Key="run/shard-000007.jsonl")["UploadId"]
    other = s3.create_multipart_upload(Bucket=bucket,
                                       Key="run/part-0001-of-0002/shard-000007.jsonl")
    sink_for(moto.url, bucket).prepare({"shard-000007.jsonl", "shard-000008.jsonl"})
    left = {u["Key"]: u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]}
    assert left == {"run/part-0001-of-0002/shard-000007.jsonl": other["UploadId"]}
    assert mine not in left.values()
