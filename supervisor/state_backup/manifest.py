"""`_state/backup.json`: what a state backup is, written after the DB copy it names.

It names the DB object and its digest (the restore checks the bytes against it), says whose
it is (partition and prompt file digest: a restore refuses anything else), and lists the
shards the DB had verified as uploaded with their digests, which is what `verify` checks
the output's bytes against without downloading a whole DB.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

FORMAT = 1


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
    format: int = FORMAT

    def to_bytes(self) -> bytes:
        body = asdict(self)
        body["shards"] = [asdict(s) for s in self.shards]
        return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> BackupManifest:
        try:
            raw: Any = json.loads(data.decode("utf-8"))
            if raw.get("format") != FORMAT:
                raise ManifestError(f"{where}: backup format {raw.get('format')!r}, this "
                                    f"supervisor reads {FORMAT}")
            shards = tuple(ShardRecord(**s) for s in raw.pop("shards"))
            return cls(**raw, shards=shards)
        except ManifestError:
            raise
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError,
                TypeError) as exc:
            raise ManifestError(f"{where}: not a state backup manifest ({exc})") from None
