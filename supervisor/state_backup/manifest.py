"""`_state/backup.json`: what a state backup is, written after the DB copy it names.

It names the DB object and its digest (the restore checks the bytes against it), says whose
it is (partition and prompt file digest: a restore refuses anything else), and lists the
shards the DB had verified as uploaded with their digests, which is what `verify` checks
the output's bytes against without downloading a whole DB.

Format 2 (this version writes it) names the copy's chunks (state_backup/chunks.py) in order:
`db_key` is then the copy's name, not an object. Format 1 (one object at `db_key`, no
chunks) is still read, so a node replaces one that an older version backed up.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

FORMAT = 2
READABLE = (1, 2)


class ManifestError(ValueError):
    """A backup.json that cannot be read; the message says why."""


@dataclass(frozen=True)
class ShardRecord:
    key: str
    records: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class BackupManifest:
    partition: str | None            # "I/N", None for a single-node job
    prompts_sha256: str
    prompts_file: str                # its name, for messages
    db_key: str
    db_sha256: str
    db_bytes: int
    created_at: float
    schema_version: int
    done: int
    total: int
    shards: tuple[ShardRecord, ...]
    chunks: tuple[str, ...] = ()     # sha256 of each chunk, in file order; () = one object
    chunk_bytes: int = 0
    format: int = FORMAT

    def to_bytes(self) -> bytes:
        body = asdict(self)
        body["shards"] = [asdict(s) for s in self.shards]
        body["chunks"] = list(self.chunks)
        return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> BackupManifest:
        try:
            raw: Any = json.loads(data.decode("utf-8"))
            if raw.get("format") not in READABLE:
                raise ManifestError(f"{where}: backup format {raw.get('format')!r}, this "
                                    f"supervisor reads {' and '.join(map(str, READABLE))}")
            shards = tuple(ShardRecord(**s) for s in raw.pop("shards"))
            chunks = tuple(str(c) for c in raw.pop("chunks", ()))
            return cls(**raw, shards=shards, chunks=chunks)
        except ManifestError:
            raise
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError,
                TypeError) as exc:
            raise ManifestError(f"{where}: not a state backup manifest ({exc})") from None
