"""A file's SHA-256, streamed: the one file digest (the prompt file, shard files, a
downloaded state backup).

The prompt file's digest is its identity: nodes of one job must split the same file, and a
restored state DB must belong to the file the node has now; size and mtime say nothing
across machines (a copy has a new mtime), the bytes do. A million-line file (a GB or two)
hashes in a few seconds at each start.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 4 * 1024 * 1024


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()
