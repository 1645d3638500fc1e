"""Where things are under a job's output prefix: shard keys and the state-DB backups.

    shard-000042.jsonl                              a single-node job's shard 42
    part-0003-of-0008/shard-000042.jsonl            node 3 of 8, its shard 42
    part-0003-of-0008/_state/backup.json            node 3's latest state backup: what it is
    part-0003-of-0008/_state/job-<ms>.db            the SQLite copies it names
    (_state/… without a partition for a single-node job)

The shard key format is decided by the job (`supervisor.job.shard_key_for`); this module
reads it back, so `verify` and the restore agree with the writer on one spelling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from supervisor.config import Partition

STATE_DIR = "_state/"
MANIFEST_NAME = "backup.json"

_SHARD_RE = re.compile(r"^(?:part-(\d{4,})-of-(\d{4,})/)?shard-(\d{6,})\.jsonl$")
_DB_RE = re.compile(r"^job-(\d+)\.db$")


@dataclass(frozen=True)
class ShardKey:
    partition: Partition | None
    seq: int
    key: str


def partition_dir(partition: Partition | None) -> str:
    if partition is None:
        return ""
    return f"part-{partition.index:04d}-of-{partition.count:04d}/"


def parse_shard_key(key: str) -> ShardKey | None:
    """A shard key's partition and sequence number, or None for anything else."""
    m = _SHARD_RE.match(key)
    if m is None:
        return None
    part = None
    if m.group(1) is not None:
        index, count = int(m.group(1)), int(m.group(2))
        if not 0 <= index < count:
            return None
        part = Partition(index, count)
    return ShardKey(part, int(m.group(3)), key)


def state_prefix(partition: Partition | None) -> str:
    return partition_dir(partition) + STATE_DIR


def manifest_key(partition: Partition | None) -> str:
    return state_prefix(partition) + MANIFEST_NAME


def db_key(partition: Partition | None, created_ms: int) -> str:
    return f"{state_prefix(partition)}job-{created_ms:015d}.db"


def is_db_key(key: str, partition: Partition | None) -> bool:
    prefix = state_prefix(partition)
    return key.startswith(prefix) and _DB_RE.match(key[len(prefix):]) is not None


def is_state_key(key: str) -> bool:
    return key.startswith(STATE_DIR) or f"/{STATE_DIR}" in key
