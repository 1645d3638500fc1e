"""Seed scale's state backup: one 15-minute interval's backup by changed chunks, and (to hold
it against) the whole-DB copy the backup made before chunks."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from seed_scale_job import fill

INTERVAL_ANSWERS = 9_000          # 15 minutes at 10 answers/s


def whole_copy_backup(db: Path, dest: Path) -> float:
    """The backup as it was before chunks, step for step: an online copy, its quick_check,
    MD5 and SHA-256 of the whole (mapped, not read into memory), one put of the whole copy
    through the same sink (read back), the uploaded shards read from the copy. Seconds."""
    import hashlib
    import mmap

    from state.db_copy import copy_live, inspect
    from supervisor.state_backup.backup import uploaded_shards
    from supervisor.uploads.local_sink import LocalDirSink
    from supervisor.uploads.sink import ShardBlob
    t0 = time.perf_counter()
    copy = db.with_name("whole.backup")
    copy_live(db, copy)
    inspect(copy)
    with open(copy, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        blob = ShardBlob("_state/job-000000000000001.db", mm,  # type: ignore[arg-type]
                         hashlib.md5(mm).hexdigest(), hashlib.sha256(mm).hexdigest())
        LocalDirSink(dest, db.parent).put(blob)
    finally:
        mm.close()
    uploaded_shards(copy)
    copy.unlink()
    return time.perf_counter() - t0


def backup_interval(work: Path, pairs: list[tuple[str, str]], upto: int,
                    whole_copy: bool) -> dict[str, Any]:
    """One backup, INTERVAL_ANSWERS more answers, another backup: what the second costs, and
    (with `whole_copy`) the time of a whole copy, the design before chunks, at the same
    point; its bytes are the DB's size either way."""
    from supervisor.state_backup.backup import StateBackup
    from supervisor.state_backup.restore import NodeIdentity
    from supervisor.uploads.local_sink import LocalDirSink
    from supervisor.uploads.output_reader import DirectoryReader
    dest = work / "backup-out"
    db = work / "job.db"
    me = NodeIdentity(None, "0" * 64, "prompts.jsonl")
    backup = StateBackup(db, LocalDirSink(dest, db.parent), DirectoryReader(dest), me, 0)
    t0 = time.perf_counter()
    backup.backup_sync()
    first_s = time.perf_counter() - t0
    fill(work, upto, pairs)
    t0 = time.perf_counter()
    m = backup.backup_sync()
    after_s = time.perf_counter() - t0
    assert backup.last_sent is not None
    shutil.rmtree(dest)          # disk: at 900K each of these is ~11 GB
    whole_s = None
    if whole_copy:
        whole_s = whole_copy_backup(db, dest)
        shutil.rmtree(dest)
    return {"db_bytes": m.db_bytes, "chunks": len(m.chunks), "first_backup_s": first_s,
            "after_sent_bytes": backup.last_sent.bytes, "after_sent_chunks": backup.last_sent.chunks,
            "after_s": after_s, "before_sent_bytes": m.db_bytes, "before_s": whole_s}
