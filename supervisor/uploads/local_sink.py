"""A local output directory as a sink.

With a local output the shard writer already writes into the output directory (the spool
*is* the destination), so "uploading" is checking that the file under the key holds the
shard's bytes; nothing is copied and nothing is ever deleted. A destination elsewhere (another
mount, say) gets an atomic copy, read back before it counts.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from supervisor.uploads.local_files import check_file, list_shard_files, write_atomically
from supervisor.uploads.sink import (
    CorruptUploadError,
    Receipt,
    ShardBlob,
    Sink,
    TransientUploadError,
)


class LocalDirSink(Sink):
    def __init__(self, directory: Path, spool: Path) -> None:
        self.directory = Path(directory)
        self.in_place = self.directory.resolve() == Path(spool).resolve()
        self.removes_local = not self.in_place

    def describe(self) -> str:
        return str(self.directory)

    @property
    def remote(self) -> bool:
        return False

    def put(self, blob: ShardBlob) -> Receipt:
        if self.in_place:
            # The blob was just read from this very file and its digest checked against the
            # DB by the uploader: there is nothing more to learn by reading it again.
            return Receipt(etag=None, checksum=f"sha256:{blob.sha256}", verified_by="local-digest")
        path = self.directory / blob.key
        try:
            write_atomically(path, blob.data)
            # Read back what the destination holds: a full disk or a bad mount shows here.
            got = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            raise TransientUploadError(f"{path}: {exc.strerror or exc}") from exc
        if got != blob.sha256:
            raise CorruptUploadError(f"{path}: holds sha256 {got[:16]}…, the shard is "
                                     f"{blob.sha256[:16]}…")
        return Receipt(etag=None, checksum=f"sha256:{got}", verified_by="local-digest")

    def check(self, key: str, size: int, sha256: str, etag: str | None,
              read_back: bool = False) -> str | None:
        return check_file(self.directory / key, size, sha256)

    def list_keys(self, prefix: str = "") -> list[str]:
        return list_shard_files(self.directory, prefix)

    def read(self, key: str) -> bytes:
        return (self.directory / key).read_bytes()
