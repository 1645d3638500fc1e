"""A DB copy as fixed-size, content-addressed chunks, so a backup uploads what changed.

SQLite's online backup copies the DB page for page, so two copies taken 15 minutes apart
are the same bytes wherever no page changed. Splitting each copy into fixed chunks (a whole
number of pages) named by their sha256 turns that into an incremental backup with no
bookkeeping in the DB: a chunk whose name is already in the output is not sent again. Rows
are appended in import order and answers fill the table in claim order, so the pages that
change in an interval are few and close together; a job near its end re-sends tens of MB an
interval, not its 11 GB (benchmarks/README.md, "Seed scale").

A restore downloads the chunks the manifest lists, in order, checks each against its name
and the whole against the manifest's digest, and gets the copy back byte for byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from supervisor.config import Partition
from supervisor.state_backup.keys import state_prefix

# 1 MiB: 256 SQLite pages. Smaller chunks re-send less around each changed page but cost a
# PUT and a manifest entry each; at 11 GB a 1 MiB chunk list is ~11K names (~0.8 MB of JSON).
CHUNK_BYTES = 1 << 20

CHUNK_DIR = "chunks/"


@dataclass(frozen=True)
class Chunk:
    index: int
    offset: int
    size: int
    sha256: str


def chunk_prefix(partition: Partition | None) -> str:
    return state_prefix(partition) + CHUNK_DIR


def chunk_key(partition: Partition | None, sha256: str) -> str:
    return chunk_prefix(partition) + sha256


def split(path: Path, chunk_bytes: int = CHUNK_BYTES) -> tuple[list[Chunk], str]:
    """The file's chunks and the sha256 of the whole, in one read."""
    whole = hashlib.sha256()
    chunks: list[Chunk] = []
    with open(path, "rb") as f:
        offset = 0
        while data := f.read(chunk_bytes):
            whole.update(data)
            chunks.append(Chunk(len(chunks), offset, len(data), hashlib.sha256(data).hexdigest()))
            offset += len(data)
    return chunks, whole.hexdigest()


def read_chunk(path: Path, chunk: Chunk) -> bytes:
    with open(path, "rb") as f:
        f.seek(chunk.offset)
        return f.read(chunk.size)


def assemble(parts: Iterator[tuple[str, bytes]], dest: Path) -> str:
    """Write (expected sha256, bytes) pairs to `dest` in order; returns the whole's sha256.
    Raises ValueError naming the first chunk whose bytes are not its name."""
    whole = hashlib.sha256()
    with open(dest, "wb") as f:
        for expected, data in parts:
            got = hashlib.sha256(data).hexdigest()
            if got != expected:
                raise ValueError(f"chunk {expected[:12]}…: its bytes hash to {got[:12]}…")
            whole.update(data)
            f.write(data)
    return whole.hexdigest()
