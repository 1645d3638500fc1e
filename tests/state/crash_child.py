"""The process the exactly-once test kills: a miniature job loop over the real store and
shard writer, with no servers. `python crash_child.py DB SPOOL`; DFLASH_CRASH_AT names where
it SIGKILLs itself (see state/crash_points.py). Exits 0 once every prompt is done, every
truncated one has been regenerated, and the last shard is written.

Outcomes are a function of (id, attempts), so a run that is killed and restarted makes the
same decisions: some prompts fail once before succeeding (Retry), some are first cut off at
max_tokens 100 and later regenerated at 200 (their shard is rewritten in place).
"""

from __future__ import annotations

import hashlib
import sys
import time

from state.records import Completion, Done, Retry
from state.store import Store
from supervisor.shards.writer import ShardWriter

SHARD_SIZE = 16
REGEN_MAX_TOKENS = 200


def _h(pid: str) -> int:
    return int(hashlib.sha256(pid.encode()).hexdigest()[:8], 16)


def outcome(pid: str, attempts: int) -> Done | Retry:
    retried_first = 1 if _h(pid) % 7 == 0 else 0
    if attempts < retried_first:
        return Retry(pid, "connection reset", 5)
    truncated = _h(pid) % 4 == 0 and attempts == retried_first
    now = time.time()
    return Done(id=pid, completion=Completion(
                    content="" if truncated else f"answer to {pid}",
                    reasoning_content=f"thoughts on {pid} (attempt {attempts + 1})",
                    finish_reason="length" if truncated else "stop", prompt_tokens=11,
                    completion_tokens=100 if truncated else 42, reasoning_tokens=30),
                max_tokens=100 if truncated else REGEN_MAX_TOKENS, model="crash-test",
                server="gpu0", started_at=now - 0.5, finished_at=now)


def key_for(seq: int) -> str:
    return f"part-0000-of-0001/shard-{seq:06d}.jsonl"


def main(db: str, spool: str) -> int:
    store = Store.open(db)
    try:
        store.recover_in_flight()
        writer = ShardWriter(store, spool, SHARD_SIZE, key_for)
        writer.sync(False)            # whatever a killed run left assigned is written first
        for _ in range(100_000):      # bounded: far more iterations than the job needs
            batch = store.claim(5, "gpu0", time.time())
            if batch:
                store.record([outcome(c.id, c.attempts) for c in batch])
                writer.sync(False)
                continue
            counts = store.counts()
            assert counts.in_flight == 0, counts
            if counts.pending:
                continue
            if store.requeue_truncated(REGEN_MAX_TOKENS):
                continue
            writer.sync(True)
            return 0
        return 3
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
