"""Done results → JSONL shard files: deterministic keys, the exactly-once writer, the job's
shard task. Membership is decided in the store (state/shards_table.py) before any file."""

from supervisor.shards.keys import (
                                    ShardKey,
                                    parse_shard_key,
                                    partition_dir,
                                    shard_key_for,
                                    spool_dir,
)
from supervisor.shards.loop import ShardLoop
from supervisor.shards.writer import ShardWriter, WrittenShard, shard_bytes

__all__ = ["ShardKey", "ShardLoop", "ShardWriter", "WrittenShard", "parse_shard_key",
           "partition_dir", "shard_bytes", "shard_key_for", "spool_dir"]
