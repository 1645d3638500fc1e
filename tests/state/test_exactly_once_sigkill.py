"""Exactly-once under SIGKILL: a child process runs the store and the shard writer, is killed
at several points (mid-transaction, between a shard's write and its rename, after the rename
but before the DB records it), restarted each time, and finally finishes. Every imported id
is then in exactly one shard line, nothing else is, and every file matches the DB's digest."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from state.store import Store
from supervisor.prompts.prompt_import import import_file
from tests.fixtures import REPO
from tests.fixtures.real_prompts import CHAT_QUESTIONS

CHILD = REPO / "tests" / "fixtures" / "shard_crash_child.py"

# Each run resumes the previous one's DB and spool, and is killed at the named point.
CRASHES = ["claim.mid_tx:3", "record.mid_tx:4", "assign.mid_tx:2", "shard.before_rename:2",
           "shard.after_rename:3", "record.mid_tx:25", "assign.mid_tx:3",
           "shard.before_rename:4", "shard.after_rename:5", "record.mid_tx:20"]


def run_child(db: Path, spool: Path, crash_at: str | None) -> int:
    env = {k: v for k, v in os.environ.items() if k != "DFLASH_CRASH_AT"}
    env["PYTHONPATH"] = str(REPO)
    if crash_at:
        env["DFLASH_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, str(CHILD), str(db), str(spool)], env=env, cwd=REPO,
                          timeout=90, stdin=subprocess.DEVNULL).returncode


def shard_files(spool: Path) -> dict[str, bytes]:
    return {str(p.relative_to(spool)): p.read_bytes() for p in sorted(spool.rglob("*"))
            if p.is_file()}


def import_prompts(tmp_path: Path, db: Path) -> list[str]:
    """400 generated prompts plus the real questions fixture; returns their ids."""
    path = tmp_path / "prompts.jsonl"
    ids = [f"gen-{i:04d}" for i in range(400)]
    with open(path, "w", encoding="utf-8") as f:
        for i, pid in enumerate(ids):
            f.write(json.dumps({"id": pid, "prompt": f"Question number {i}?"}) + "\n")
    files = [path, CHAT_QUESTIONS]
    ids += [str(json.loads(line)["question_id"])
            for line in CHAT_QUESTIONS.read_text(encoding="utf-8").splitlines()]
    with Store.open(db) as store:
        for p in files:
            summary = import_file(store, p)
            assert summary.rejected == 0
    return ids


def test_every_id_exactly_once_after_kills_at_every_point(tmp_path):
    db, spool = tmp_path / "job.db", tmp_path / "spool"
    ids = import_prompts(tmp_path, db)
    for point in CRASHES:
        assert run_child(db, spool, point) == -signal.SIGKILL, f"{point} was never reached"
    assert run_child(db, spool, None) == 0

    files = shard_files(spool)
    assert not [name for name in files if name.endswith(".tmp")]
    seen: list[str] = []
    for data in files.values():
        seen += [json.loads(line)["id"] for line in data.splitlines()]
    assert sorted(seen) == sorted(ids)                       # exactly once, nothing else
    with Store.open(db) as store:
        counts = store.counts()
        assert (counts.done, counts.pending, counts.in_flight) == (len(ids), 0, 0)
        assert store.truncated_count() == 0                  # every truncated one regenerated
        assert store.recount() == counts
        shards = store.shards()
    assert sorted(s.key for s in shards) == sorted(files)
    for s in shards:
        assert s.status == "written"
        assert s.sha256 == hashlib.sha256(files[s.key]).hexdigest()
    # Only the last shard may be partial.
    sizes = [s.records for s in sorted(shards, key=lambda s: s.id)]
    assert all(n == 16 for n in sizes[:-1]) and 0 < sizes[-1] <= 16


def test_a_shard_rewritten_after_a_kill_has_the_same_bytes(tmp_path):
    db, spool = tmp_path / "job.db", tmp_path / "spool"
    import_prompts(tmp_path, db)
    # Killed after the rename, before the DB knew: the file is complete but unrecorded.
    assert run_child(db, spool, "shard.after_rename:2") == -signal.SIGKILL
    before = shard_files(spool)
    with Store.open(db) as store:
        unrecorded = [s.key for s in store.shards_to_write()]
    assert unrecorded and all(k in before for k in unrecorded)
    # The next run rewrites it first thing, then is killed before it changes anything else.
    assert run_child(db, spool, "claim.mid_tx:1") == -signal.SIGKILL
    after = shard_files(spool)
    assert after == before
    with Store.open(db) as store:
        assert store.shards_to_write() == []
