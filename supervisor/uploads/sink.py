"""Where verified shards go: the small interface every destination implements.

A sink's `put` runs in a worker thread (never on the event loop), uploads one shard's bytes
under its key, checks for itself that the destination holds exactly those bytes, and returns
what it checked. It raises one of the errors below; the uploader decides what happens next
(retry later, or stop uploading) from the error's class alone, so a sink never retries on its
own beyond what its client library does for a single request.
"""

from __future__ import annotations

import base64
import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ShardBlob:
    """One shard's bytes and their digests, as read from the spool."""
    key: str
    data: bytes
    md5: str        # hex
    sha256: str     # hex

    @classmethod
    def of(cls, key: str, data: bytes) -> ShardBlob:
        return cls(key, data, hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest())

    @classmethod
    def read(cls, key: str, path: Path) -> ShardBlob:
        return cls.of(key, path.read_bytes())

    @property
    def size(self) -> int:
        return len(self.data)


def b64(hex_digest: str) -> str:
    """S3's Content-MD5 and x-amz-checksum-* headers carry base64 of the raw digest."""
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


@dataclass(frozen=True)
class Receipt:
    """What the destination returned and how the daemon convinced itself of the bytes."""
    etag: str | None           # as the store returned it, quotes stripped
    checksum: str              # "sha256:<hex>" of the bytes verified at the destination
    verified_by: str           # "etag", "part-etags", "read-back", "local-digest"
    parts: int = 1


class UploadError(Exception):
    """An upload that did not happen (or cannot be trusted)."""


class TransientUploadError(UploadError):
    """Worth retrying later: throttling, 5xx, timeouts, refused connections."""


class CorruptUploadError(TransientUploadError):
    """The destination holds bytes other than the shard's: upload it again."""


class FatalUploadError(UploadError):
    """Retrying cannot help until an operator acts: credentials, permissions, no bucket."""


class Sink(ABC):
    # Whether the spool copy may be deleted once a put is verified. False where the spool
    # *is* the destination (a local output directory).
    removes_local: bool = True

    @abstractmethod
    def describe(self) -> str:
        """Where shards go, for logs and the status snapshot (`s3://bucket/prefix/`)."""

    @abstractmethod
    def put(self, blob: ShardBlob) -> Receipt:
        """Upload and verify one shard (blocking; called from a worker thread)."""

    def prepare(self, own_keys: set[str]) -> None:  # noqa: B027 - optional: few sinks leave debris
        """Once before the first put (blocking): clear what a killed daemon left behind.
        `own_keys` are this job's shard keys; a sink must not touch any other key."""

    # -- checking what is already there (start, end of a job, `verify`, `rebuild-state`) ------
    # Blocking, from a worker thread. `check` returns why the destination does not hold the
    # shard (missing, other size, other digest) or None when it does; it raises
    # TransientUploadError/FatalUploadError when it cannot tell (a store that is down is not
    # a changed shard).

    def check(self, key: str, size: int, sha256: str, etag: str | None,
              read_back: bool = False) -> str | None:
        raise NotImplementedError(f"{type(self).__name__} cannot check shards")

    def list_keys(self, prefix: str = "") -> list[str]:
        """Shard keys (relative to the destination) under `prefix`, sorted."""
        raise NotImplementedError(f"{type(self).__name__} cannot list shards")

    def read(self, key: str) -> bytes:
        """One shard's bytes as the destination holds them."""
        raise NotImplementedError(f"{type(self).__name__} cannot read shards")

    @property
    def remote(self) -> bool:
        return True
