"""The state DB copied beside the shards, periodically and at stop, under the partition's key.

One backup: an online copy of the DB (state/db_copy.py) into the state directory, split into
content-addressed chunks (state_backup/chunks.py); the chunks the output does not hold yet
are put through the same sink and the same verification as a shard (ETag or read-back on S3,
read-back on a directory), then `_state/backup.json` naming them in order. So an interval
uploads what changed since the last backup, not the whole DB. Chunks that neither this
manifest nor the one before it name are deleted after that (a kill between the puts leaves
the old manifest naming chunks that are still there). Runs in a worker thread, never on the
event loop; a failure is logged and retried at the next interval, and never stops the job.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from state.db_copy import copy_live, inspect
from supervisor.state_backup.chunks import CHUNK_BYTES, chunk_key, chunk_prefix, read_chunk, split
from supervisor.state_backup.keys import db_key, is_db_key, manifest_key, state_prefix
from supervisor.state_backup.manifest import BackupManifest, ManifestError, ShardRecord
from supervisor.state_backup.restore import NodeIdentity, RestoreRefused, check_siblings
from supervisor.uploads.output_reader import OutputReader
from supervisor.uploads.sink import ShardBlob, Sink, UploadError

log = logging.getLogger("supervisor.backup")


@dataclass(frozen=True)
class Sent:
    """What one backup put to the output: the chunks it lacked, and the manifest."""
    chunks: int
    bytes: int


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
                 interval_s: float, chunk_bytes: int = CHUNK_BYTES,
                 on_conflict: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.db_path = db_path
        self.sink = sink
        self.reader = reader
        self.me = me
        self.interval_s = interval_s
        self.chunk_bytes = chunk_bytes
        self.on_conflict = on_conflict
        self.last: BackupManifest | None = None
        self.last_error: str | None = None
        self.last_sent: Sent | None = None
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
        part = self.me.partition
        try:
            info = inspect(copy)
            chunks, sha256 = split(copy, self.chunk_bytes)
            held = {o.key for o in self.reader.list(chunk_prefix(part))}
            sent = Sent(0, 0)
            for chunk in chunks:
                key = chunk_key(part, chunk.sha256)
                if key in held:
                    continue
                receipt = self.sink.put(ShardBlob.of(key, read_chunk(copy, chunk)))
                held.add(key)
                sent = Sent(sent.chunks + 1, sent.bytes + chunk.size)
            manifest = BackupManifest(
                partition=self.me.partition_text, prompts_sha256=self.me.prompts_sha256,
                prompts_file=self.me.prompts_file, db_key=db_key(part, int(started * 1000)),
                db_sha256=sha256, db_bytes=sum(c.size for c in chunks), created_at=started,
                schema_version=info.schema_version, done=info.done, total=info.total,
                shards=uploaded_shards(copy), chunks=tuple(c.sha256 for c in chunks),
                chunk_bytes=self.chunk_bytes)
        finally:
            copy.unlink(missing_ok=True)
        previous = self._previous()
        body = manifest.to_bytes()
        receipt = self.sink.put(ShardBlob.of(manifest_key(part), body))
        self.last_sent = Sent(sent.chunks, sent.bytes + len(body))
        self._prune(manifest, previous)
        log.info("state backed up to %s%s (%.1f MB DB, %.1f MB sent in %d new chunks, %d/%d "
                 "done, %d shards uploaded, verified by %s) in %.1f s", self.reader.describe(),
                 manifest_key(part), manifest.db_bytes / 1e6, self.last_sent.bytes / 1e6,
                 sent.chunks, manifest.done, manifest.total, len(manifest.shards),
                 receipt.verified_by, time.time() - started)
        return manifest

    def _previous(self) -> BackupManifest | None:
        """The manifest this one replaces: its chunks are kept until the next backup."""
        key = manifest_key(self.me.partition)
        try:
            return BackupManifest.from_bytes(self.reader.read_bytes(key), key)
        except (FileNotFoundError, ManifestError):
            return None

    def _prune(self, current: BackupManifest, previous: BackupManifest | None) -> None:
        part = self.me.partition
        keep = {chunk_key(part, c) for c in current.chunks}
        if previous is not None:
            keep |= {chunk_key(part, c) for c in previous.chunks}
            if not previous.chunks:
                keep.add(previous.db_key)           # a whole-file copy from format 1
        for obj in list(self.reader.list(state_prefix(part))):
            ours = obj.key.startswith(chunk_prefix(part)) or is_db_key(obj.key, part)
            if ours and obj.key not in keep:
                self.reader.delete(obj.key)
