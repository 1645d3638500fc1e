"""Builders for the upload tests: a real store with done prompts and shards written into a
spool by the real shard writer."""

from __future__ import annotations

import time
from pathlib import Path

from state.records import Completion, Done, ImportRow
from state.store import Store
from supervisor.shards.writer import ShardWriter


def key_for(seq: int) -> str:
    return f"shard-{seq:06d}.jsonl"


def finish_prompts(store: Store, ids: list[str], t0: float) -> None:
    claimed = store.claim(len(ids), "gpu0", t0)
    store.record([Done(id=c.id, completion=Completion(
                           content=f"answer to {c.id} " + "x" * 200,
                           reasoning_content=f"thinking about {c.id}", finish_reason="stop",
                           prompt_tokens=10, completion_tokens=20, reasoning_tokens=5),
                       max_tokens=100, model="m", server="gpu0", started_at=t0 - 1,
                       finished_at=t0 + i * 1e-3) for i, c in enumerate(claimed)])


def store_with_shards(directory: Path, prompts: int, shard_size: int,
                      flush: bool = True) -> tuple[Store, ShardWriter, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    store = Store.open(directory / "job.db")
    store.import_batch([ImportRow(f"p{i:05d}", [{"role": "user", "content": f"question {i}"}],
                                  i + 1) for i in range(prompts)])
    finish_prompts(store, [f"p{i:05d}" for i in range(prompts)], time.time())
    spool = directory / "spool"
    writer = ShardWriter(store, spool, shard_size, key_for)
    writer.sync(flush)
    return store, writer, spool
