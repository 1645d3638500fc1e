"""Where a node's state backups go under the output prefix, beside its shards:

    part-0003-of-0008/_state/backup.json      node 3's latest backup: what it is
    part-0003-of-0008/_state/chunks/<sha256>  the pieces of the DB copies it names
    part-0003-of-0008/_state/job-<ms>.db      a whole copy, from a version before chunks
    (_state/… without a partition for a single-node job)
"""

from __future__ import annotations

import re

from supervisor.config import Partition
from supervisor.shards.keys import partition_dir

STATE_DIR = "_state/"
MANIFEST_NAME = "backup.json"

_DB_RE = re.compile(r"^job-(\d+)\.db$")


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
