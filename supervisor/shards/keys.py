"""Where shards go: their deterministic keys and the local directory their files are written in."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from supervisor.config import JobConfig, Partition


def shard_key_for(partition: Partition | None) -> Callable[[int], str]:
    """Deterministic shard keys; with a partition the node's part is in the key so N nodes
    can write into one prefix without colliding."""
    if partition is None:
        return lambda seq: f"shard-{seq:06d}.jsonl"
    prefix = f"part-{partition.index:04d}-of-{partition.count:04d}/"
    return lambda seq: f"{prefix}shard-{seq:06d}.jsonl"


def spool_dir(config: JobConfig) -> Path:
    """Where shard files are written: the output directory itself for a local output,
    a local spool for S3."""
    if config.output_is_s3:
        return config.path(config.uploads.spool_dir)
    return config.path(config.job.output)
