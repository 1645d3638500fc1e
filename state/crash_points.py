"""Named crash points for the exactly-once tests: `DFLASH_CRASH_AT=name[:n]` makes the process
SIGKILL itself the n-th time (default 1st) execution reaches `crash_point(name)`.

SIGKILL, not an exception: nothing runs after it (no finally, no rollback, no flush), which is
what a power cut or the OOM killer leaves behind. Unset (always, outside tests) it costs one
comparison. The points in use:

- `record.mid_tx`    Store.record: outcomes updated, transaction not committed
- `claim.mid_tx`     Store.claim: prompts marked in flight, not committed
- `assign.mid_tx`    Store.assign_shards: shard rows inserted, not committed
- `shard.before_rename`  ShardWriter: `<key>.tmp` written and fsynced, not renamed
- `shard.after_rename`   ShardWriter: file in place, not yet recorded as written
"""

from __future__ import annotations

import os
import signal

ENV = "DFLASH_CRASH_AT"


def _parse(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    name, _, nth = value.partition(":")
    return name, int(nth) if nth else 1


_target = _parse(os.environ.get(ENV))
_hits = 0


def crash_point(name: str) -> None:
    global _hits
    if _target is None or _target[0] != name:
        return
    _hits += 1
    if _hits >= _target[1]:
        os.kill(os.getpid(), signal.SIGKILL)
