"""An S3 location (`s3://bucket/prefix/`) and the boto3 client that reaches it.

Credentials and region come from boto3's usual chain (environment, shared config and
credentials files, instance or container role); `uploads.endpoint_url` points it at an
S3-compatible store. The client is built lazily, in the first worker thread that needs it:
building one reads config files, which must not happen on the event loop.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from supervisor.config import UploadsSection


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str      # "" or ends with "/"

    @classmethod
    def parse(cls, url: str) -> S3Location:
        if not url.startswith("s3://"):
            raise ValueError(f"not an s3:// URL: {url!r}")
        bucket, _, prefix = url[len("s3://"):].partition("/")
        if not bucket:
            raise ValueError(f"no bucket in {url!r} (expected s3://bucket/prefix/)")
        prefix = prefix.strip("/")
        return cls(bucket, prefix + "/" if prefix else "")

    def key(self, shard_key: str) -> str:
        return self.prefix + shard_key

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


# Retries inside one request are botocore's (standard mode knows S3's throttling codes and
# keeps a retry quota, so a blip costs a second, not a backlog); a longer outage is the
# uploader's business: the shard goes back to the backlog and is tried again later with
# backoff, without holding a thread. Few attempts here keep one failing put short.
BOTOCORE_ATTEMPTS = 3


def client_config(uploads: UploadsSection) -> Any:
    from botocore.config import Config

    return Config(
        region_name=uploads.region,
        retries={"mode": "standard", "total_max_attempts": BOTOCORE_ATTEMPTS},
        connect_timeout=uploads.timeout_s,
        read_timeout=uploads.timeout_s,
        # One connection per upload thread, plus one for a verification read.
        max_pool_connections=uploads.concurrency + 1,
        # We send our own Content-MD5 and SHA-256 headers. botocore's default (a CRC32 on
        # every request, sent as an aws-chunked trailer) is refused by some S3-compatible
        # stores, and it would add a checksum nobody checks.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )


class LazyClient:
    """One thread-safe boto3 S3 client, built on first use."""

    def __init__(self, uploads: UploadsSection) -> None:
        self.uploads = uploads
        self._client: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3

                # A Session per client: boto3's default session is not thread-safe.
                session = boto3.session.Session()
                self._client = session.client("s3", endpoint_url=self.uploads.endpoint_url,
                                              config=client_config(self.uploads))
            return self._client
