"""Shard files on a local disk: writing one atomically, is this file the shard the DB
describes, and which shard files does a directory hold. Used for a local output and for the
S3 spool alike (the shard writer and the local sink both write through here)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from state.crash_points import crash_point
from supervisor.uploads.file_digest import file_sha256

SHARD_GLOB = "shard-*.jsonl"
TMP_SUFFIX = ".tmp"


def check_file(path: Path, size: int, sha256: str) -> str | None:
    """Why `path` is not the shard (missing, other size, other bytes), or None when it is.
    The size is compared first: a cut or appended line shows without reading the file."""
    try:
        got_size = path.stat().st_size
    except FileNotFoundError:
        return f"{path} is missing"
    if got_size != size:
        return f"{path} holds {got_size} bytes, the DB says {size}"
    got = file_sha256(path)
    if got != sha256:
        return f"{path} holds other bytes (sha256 {got[:16]}…, the DB says {sha256[:16]}…)"
    return None


def list_shard_files(directory: Path, prefix: str = "") -> list[str]:
    """Keys (paths relative to `directory`) of the shard files under `directory/prefix`."""
    base = directory / prefix if prefix else directory
    if not base.is_dir():
        return []
    return sorted(str(p.relative_to(directory)) for p in base.rglob(SHARD_GLOB) if p.is_file())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes | Iterable[bytes]) -> None:
    """`path` ends up holding `data` (the bytes, or the pieces in order) completely, or keeps
    what it held before."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "wb") as f:
        if isinstance(data, (bytes, bytearray, memoryview)):
            f.write(data)
        else:
            for piece in data:
                f.write(piece)
        f.flush()
        os.fsync(f.fileno())
    crash_point("shard.before_rename")
    os.replace(tmp, path)
    # The rename is only durable once the directory entry is on disk.
    _fsync_dir(path.parent)
