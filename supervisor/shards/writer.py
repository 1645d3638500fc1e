"""Done results → JSONL shard files, exactly once.

The order of events is what makes it exactly-once under a kill at any instant:
1. `Store.assign_shards` decides, in one durable transaction, which prompts form shard N.
2. The file is built from the DB rows alone (deterministic bytes), written to `<key>.tmp`,
   fsynced, renamed over `<key>`, and the directory fsynced, so the name holds either the old
   complete bytes or the new complete bytes.
3. `Store.mark_shard_written` records it ('written'; the uploader takes it from there).
A kill before 3 leaves the shard 'assigned' and the next sync rewrites the same bytes under
the same name; a leftover `.tmp` is removed. A regenerated prompt sends its shard back to
'assigned': the file is rewritten in place with the new line and goes out again.

The line format (keys in this order, compact JSON, "\n" after each line, lines by prompt id):
  id, messages (the prompt + {"role": "assistant", "content", "reasoning_content"}),
  finish_reason, loop (true: truncated and repeating itself; null: recorded before loops
  were checked), usage {prompt_tokens, completion_tokens, reasoning_tokens, total_tokens},
  max_tokens, model, server, attempt, time (finished_at, float unix seconds), and only
  where they apply (so the lines of a job that uses neither keep their bytes):
  continued_from (the answer was continued from its exact tokens: the output tokens its
  last part started from) and output_ids (the sampled ids, with job.shard_output_ids)
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from state.crash_points import crash_point
from state.records import Shard, ShardLine
from state.store import Store
from supervisor.uploads.local_files import TMP_SUFFIX, write_atomically

log = logging.getLogger("supervisor.shards")

# Lines read and encoded at a time while a shard is written: ~0.6 MB of the seed's 11.5 KB
# answers, where a whole shard of 500 was ~6 MB of rows, ~6 MB of JSON and ~6 MB joined,
# held at once on the writer's thread each time (the daemon's memory swung by that much).
LINES_PER_READ = 50

def line_object(line: ShardLine) -> dict[str, Any]:
    c = line.completion
    prompt_tokens = c.prompt_tokens or 0
    completion_tokens = c.completion_tokens or 0
    obj: dict[str, Any] = {
        "id": line.id,
        "messages": [*line.messages, {"role": "assistant", "content": c.content,
                                      "reasoning_content": c.reasoning_content}],
        "finish_reason": c.finish_reason,
        "loop": line.loop,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "reasoning_tokens": c.reasoning_tokens or 0,
                  "total_tokens": prompt_tokens + completion_tokens},
        "max_tokens": line.max_tokens,
        "model": line.model,
        "server": line.server,
        "attempt": line.attempts,
        "time": line.finished_at,
    }
    if line.continued_from is not None:
        obj["continued_from"] = line.continued_from
    if line.output_ids is not None:
        obj["output_ids"] = list(line.output_ids)
    return obj


def shard_bytes(lines: list[ShardLine]) -> bytes:
    """The whole file: a pure function of the rows (ordered by id by the store)."""
    return b"".join(
        json.dumps(line_object(l), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        + b"\n" for l in lines)


@dataclass(frozen=True)
class WrittenShard:
    id: int
    path: Path
    records: int
    bytes: int
    sha256: str
    md5: str


class ShardWriter:
    """`sync()` from one thread at a time (the job runs it behind a CapacityLimiter(1))."""

    def __init__(self, store: Store, spool_dir: str | Path, shard_size: int,
                 key_for: Callable[[int], str], output_ids: bool = False) -> None:
        if shard_size <= 0:
            raise ValueError("shard_size must be positive")
        self.store = store
        self.spool_dir = Path(spool_dir)
        self.shard_size = shard_size
        self.key_for = key_for
        self.output_ids = output_ids        # lines carry the sampled ids (job.shard_output_ids)
        self._cleaned = False

    def path_for(self, shard: Shard) -> Path:
        return self.spool_dir / shard.key

    def sync(self, flush: bool = False) -> list[int]:
        """Assign new shards, then write every assigned one. Returns the ids written."""
        if not self._cleaned:
            self.remove_orphan_tmp()
            self._cleaned = True
        self.store.assign_shards(self.shard_size, self.key_for, flush)
        written: list[int] = []
        for shard in self.store.shards_to_write():
            if self.write(shard) is not None:
                written.append(shard.id)
        return written

    def write(self, shard: Shard) -> WrittenShard | None:
        path = self.path_for(shard)
        sha256, md5 = hashlib.sha256(), hashlib.md5()
        records = size = 0

        def pieces() -> Iterator[bytes]:
            # LINES_PER_READ lines at a time, read, encoded, digested and written: the
            # same bytes as shard_bytes(all lines), without a shard's answers in memory.
            nonlocal records, size
            for lines in self.store.shard_line_batches(shard.id, LINES_PER_READ,
                                                             self.output_ids):
                data = shard_bytes(lines)
                sha256.update(data)
                md5.update(data)
                records += len(lines)
                size += len(data)
                yield data

        write_atomically(path, pieces())
        crash_point("shard.after_rename")
        done = WrittenShard(shard.id, path, records, size, sha256.hexdigest(), md5.hexdigest())
        if not self.store.mark_shard_written(shard.id, done.records, done.bytes, done.sha256,
                                             done.md5, time.time(), version=shard.version):
            # A regenerated result landed while we wrote: the shard is 'assigned' again
            # and the next sync writes the newer lines.
            log.info("shard %s changed while being written; rewriting it next", shard.key)
            return None
        log.info("shard %s written: %d records, %d bytes", shard.key, done.records, done.bytes)
        return done

    def remove_orphan_tmp(self) -> list[Path]:
        """`.tmp` files a killed writer left behind (never renamed, so never a shard)."""
        removed: list[Path] = []
        if not self.spool_dir.is_dir():
            return removed
        for tmp in self.spool_dir.rglob("*.jsonl" + TMP_SUFFIX):
            try:
                tmp.unlink()
            except FileNotFoundError:
                continue
            removed.append(tmp)
            log.info("removed %s, left by an interrupted shard write", tmp)
        return removed
