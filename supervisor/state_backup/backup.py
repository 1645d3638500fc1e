"""The state DB copied beside the shards, periodically and at stop, under the partition's key.

One backup: an online copy of the DB (state/db_copy.py) into the state directory, put to the
output through the same sink and the same verification as a shard (ETag or read-back on S3,
read-back on a directory), then `_state/backup.json` naming it; older copies are deleted
after that, keeping the one before (a kill between the two puts leaves the manifest naming
a copy that is still there). Runs in a worker thread, never on the event loop; a failure is
logged and retried at the next interval, and never stops the job.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import sqlite3
import time
from pathlib import Path
from typing import Awaitable, Callable

import anyio

from state.db_copy import copy_live, inspect
from supervisor.state_backup.keys import db_key, is_db_key, manifest_key, state_prefix
from supervisor.state_backup.manifest import BackupManifest, ShardRecord
from supervisor.state_backup.restore import NodeIdentity, RestoreRefused, check_siblings
from supervisor.uploads.output_reader import OutputReader
from supervisor.uploads.sink import ShardBlob, Sink, UploadError

log = logging.getLogger("supervisor.backup")

KEEP_PREVIOUS = 1


def _blob(key: str, path: Path, single_part_limit: int) -> tuple[ShardBlob, object]:
    """The copy's bytes for the sink: in memory when small, else mapped from the file so a
    multi-GB DB is not read into the daemon's memory (parts are sliced from the map)."""
    size = path.stat().st_size
    if size <= single_part_limit or size == 0:
        return ShardBlob.of(key, path.read_bytes()), None
    f = open(path, "rb")
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    f.close()
    return ShardBlob(key, mm, hashlib.md5(mm).hexdigest(),  # type: ignore[arg-type]
                     hashlib.sha256(mm).hexdigest()), mm


def uploaded_shards(path: Path) -> tuple[ShardRecord, ...]:
    """The shards the copy has as uploaded, read from the copy itself so the manifest and
    the DB it names agree."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return tuple(ShardRecord(k, int(r), int(b), s) for k, r, b, s in con.execute(
            "SELECT key, records, bytes, sha256 FROM shards WHERE status = 'uploaded' "
            "ORDER BY id"))
    finally:
        con.close()


class StateBackup:
    def __init__(self, db_path: Path, sink: Sink, reader: OutputReader, me: NodeIdentity,
                 interval_s: float, single_part_limit: int,
                 on_conflict: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.db_path = db_path
        self.sink = sink
        self.reader = reader
        self.me = me
        self.interval_s = interval_s
        self.single_part_limit = single_part_limit
        self.on_conflict = on_conflict
        self.last: BackupManifest | None = None
        self.last_error: str | None = None
        self._limiter = anyio.CapacityLimiter(1)

    async def run(self) -> None:
        """A first backup at start (so sibling nodes see this node's prompt file at once),
        then one per interval."""
        while True:
            await self.backup_now()
            if self.interval_s <= 0:
                return
            await anyio.sleep(self.interval_s)

    async def backup_now(self) -> BackupManifest | None:
        manifest = await anyio.to_thread.run_sync(self._backup_logged, limiter=self._limiter)
        if self.on_conflict is not None:
            conflict = await anyio.to_thread.run_sync(self._conflict, limiter=self._limiter)
            if conflict:
                await self.on_conflict(conflict)
        return manifest

    def _conflict(self) -> str | None:
        try:
            check_siblings(self.reader, self.me)
        except RestoreRefused as exc:
            return str(exc)
        except (UploadError, OSError) as exc:
            log.info("could not read the other nodes' backups: %s", exc)
        return None

    def _backup_logged(self) -> BackupManifest | None:
        try:
            manifest = self.backup_sync()
        except (UploadError, OSError, sqlite3.Error) as exc:
            self.last_error = str(exc)
            log.error("state backup to %s failed: %s (next try in %.0f s)",
                      self.reader.describe(), exc, self.interval_s)
            return None
        self.last, self.last_error = manifest, None
        return manifest

    def backup_sync(self) -> BackupManifest:
        started = time.time()
        copy = self.db_path.with_name(self.db_path.name + ".backup")
        copy_live(self.db_path, copy)
        try:
            info = inspect(copy)
            key = db_key(self.me.partition, int(started * 1000))
            blob, mm = _blob(key, copy, self.single_part_limit)
            size, sha256 = blob.size, blob.sha256
            try:
                receipt = self.sink.put(blob)
            finally:
                if mm is not None:
                    mm.close()  # type: ignore[attr-defined]
            manifest = BackupManifest(
                partition=self.me.partition_text, prompts_sha256=self.me.prompts_sha256,
                prompts_file=self.me.prompts_file, db_key=key, db_sha256=sha256,
                db_bytes=size, created_at=started, schema_version=info.schema_version,
                done=info.done, total=info.total, shards=uploaded_shards(copy))
        finally:
            copy.unlink(missing_ok=True)
        self.sink.put(ShardBlob.of(manifest_key(self.me.partition), manifest.to_bytes()))
        self._prune(key)
        log.info("state backed up to %s%s (%.1f MB, %d/%d done, %d shards uploaded, verified "
                 "by %s) in %.1f s", self.reader.describe(), key, manifest.db_bytes / 1e6,
                 manifest.done, manifest.total, len(manifest.shards), receipt.verified_by,
                 time.time() - started)
        return manifest

    def _prune(self, current: str) -> None:
        copies = sorted(o.key for o in self.reader.list(state_prefix(self.me.partition))
                        if is_db_key(o.key, self.me.partition))
        older = [k for k in copies if k < current]
        for key in older[:max(0, len(older) - KEEP_PREVIOUS)]:
            self.reader.delete(key)
