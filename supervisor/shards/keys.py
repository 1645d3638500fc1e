"""Where shards go: their deterministic keys (written here, and read back by `verify` and
a restore with the same spelling) and the local directory their files are written in.

    shard-000042.jsonl                      a single-node job's shard 42
    part-0003-of-0008/shard-000042.jsonl    node 3 of 8, its shard 42
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from supervisor.config import JobConfig, Partition

_SHARD_RE = re.compile(r"^(?:part-(\d{4,})-of-(\d{4,})/)?shard-(\d{6,})\.jsonl$")


@dataclass(frozen=True)
class ShardKey:
    partition: Partition | None
    seq: int
    key: str


def partition_dir(partition: Partition | None) -> str:
    """The node's folder under the output prefix ("" for a single-node job)."""
    if partition is None:
        return ""
    return f"part-{partition.index:04d}-of-{partition.count:04d}/"


def shard_key_for(partition: Partition | None) -> Callable[[int], str]:
    """Deterministic shard keys; with a partition the node's part is in the key so N nodes
    can write into one prefix without colliding."""
    prefix = partition_dir(partition)
    return lambda seq: f"{prefix}shard-{seq:06d}.jsonl"


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


def spool_dir(config: JobConfig) -> Path:
    """Where shard files are written: the output directory itself for a local output,
    a local spool for S3."""
    if config.output_is_s3:
        return config.path(config.uploads.spool_dir)
    return config.path(config.job.output)
