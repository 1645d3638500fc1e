"""Reading a job's output location back: list what is there, stream an object, fetch one to
a file. The outside-in `verify` and the state-DB restore use it; both only read (and the
backup prunes its own old copies), so it lives beside the sinks that write.

An S3 prefix (`s3://bucket/prefix/`) or a local directory; keys are relative to the prefix
("part-0001-of-0004/shard-000042.jsonl"), with "/" between parts on both.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.config import UploadsSection
from supervisor.uploads.s3_client import LazyClient, S3Location
from supervisor.uploads.s3_errors import classify

CHUNK = 1024 * 1024


@dataclass(frozen=True)
class StoredObject:
    key: str             # relative to the location's prefix
    size: int
    etag: str | None     # S3's, quotes stripped; None for a local file


class OutputReader(ABC):
    @abstractmethod
    def describe(self) -> str: ...

    @abstractmethod
    def list(self, under: str = "") -> Iterator[StoredObject]:
        """Every object whose key starts with `under`, in key order, page by page."""

    @abstractmethod
    def chunks(self, key: str) -> Iterator[bytes]:
        """The object's bytes, a chunk at a time (constant memory); FileNotFoundError when absent."""

    @abstractmethod
    def delete(self, key: str) -> None: ...

    def read_bytes(self, key: str) -> bytes:
        return b"".join(self.chunks(key))

    def download(self, key: str, path: Path) -> None:
        with open(path, "wb") as f:
            for chunk in self.chunks(key):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())


class DirectoryReader(OutputReader):
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def describe(self) -> str:
        # Keys are appended to it in messages, as to an S3 prefix.
        return str(self.directory).rstrip("/") + "/"

    def list(self, under: str = "") -> Iterator[StoredObject]:
        if not self.directory.is_dir():
            return
        # sorted walk: the same order as S3's listing, lexicographic by key.
        for root, dirs, files in os.walk(self.directory):
            dirs.sort()
            for name in sorted(files):
                path = Path(root) / name
                key = path.relative_to(self.directory).as_posix()
                if key.startswith(under):
                    yield StoredObject(key, path.stat().st_size, None)

    def chunks(self, key: str) -> Iterator[bytes]:
        with open(self.directory / key, "rb") as f:
            while chunk := f.read(CHUNK):
                yield chunk

    def delete(self, key: str) -> None:
        (self.directory / key).unlink(missing_ok=True)


class S3Reader(OutputReader):
    def __init__(self, location: S3Location, uploads: UploadsSection,
                 client: LazyClient | None = None) -> None:
        self.location = location
        self._client = client or LazyClient(uploads)

    def describe(self) -> str:
        return str(self.location)

    @property
    def client(self) -> Any:         # a boto3 S3 client: untyped
        return self._client.get()

    def list(self, under: str = "") -> Iterator[StoredObject]:
        paginator = self.client.get_paginator("list_objects_v2")
        prefix = self.location.key(under)
        try:
            for page in paginator.paginate(Bucket=self.location.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    etag = obj.get("ETag")
                    yield StoredObject(obj["Key"][len(self.location.prefix):], int(obj["Size"]),
                                       etag.strip('"') if isinstance(etag, str) else None)
        except Exception as exc:
            raise classify(exc, f"list {self.location}{under}") from exc

    def chunks(self, key: str) -> Iterator[bytes]:
        try:
            response = self.client.get_object(Bucket=self.location.bucket,
                                              Key=self.location.key(key))
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                raise FileNotFoundError(f"{self.location}{key}") from None
            raise classify(exc, f"get {self.location}{key}") from exc
        body = response["Body"]
        try:
            while chunk := body.read(CHUNK):
                yield chunk
        except Exception as exc:
            raise classify(exc, f"read {self.location}{key}") from exc
        finally:
            body.close()

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.location.bucket, Key=self.location.key(key))
        except Exception as exc:
            raise classify(exc, f"delete {self.location}{key}") from exc


def output_reader(output: str, uploads: UploadsSection, base_dir: Path = Path(".")) -> OutputReader:
    """For `job.output` as written in a config (or on the command line)."""
    if output.startswith("s3://"):
        return S3Reader(S3Location.parse(output), uploads)
    path = Path(output).expanduser()
    return DirectoryReader(path if path.is_absolute() else base_dir / path)
