"""Shard files on a local disk: is this file the shard the DB describes, and which shard
files does a directory hold. Used for a local output and for the S3 spool alike."""

from __future__ import annotations

import hashlib
from pathlib import Path

SHARD_GLOB = "shard-*.jsonl"
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


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
