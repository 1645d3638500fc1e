"""A replacement node takes over its partition: the latest state backup becomes its state DB,
and shards its predecessor uploaded after that backup are taken back in, so the node resumes
exactly where the lost one stopped and nothing already uploaded is generated again.

Refused, with one line saying why (exit 2: a retry cannot help): a backup of another
partition or from another prompt file, one whose bytes do not match its manifest, and any
node whose prompt file differs from one its siblings recorded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from state.db_copy import CopyError, inspect
from state.records import Completion, ShardLine
from state.shard_adoption import AdoptionError, UploadedShard, adopt_shard
from state.store import Store
from supervisor.config import Partition
from supervisor.shards.keys import parse_shard_key, partition_dir
from supervisor.state_backup.chunks import assemble, chunk_prefix
from supervisor.state_backup.keys import MANIFEST_NAME, STATE_DIR, manifest_key
from supervisor.state_backup.manifest import BackupManifest, ManifestError
from supervisor.uploads.file_digest import file_sha256
from supervisor.uploads.output_reader import OutputReader

log = logging.getLogger("supervisor.backup")


class RestoreRefused(RuntimeError):
    """The node must not start on this state; the message names both sides."""


@dataclass(frozen=True)
class NodeIdentity:
    partition: Partition | None
    prompts_sha256: str
    prompts_file: str

    @property
    def partition_text(self) -> str | None:
        return str(self.partition) if self.partition is not None else None


def _read_manifest(reader: OutputReader, key: str) -> BackupManifest | None:
    try:
        data = reader.read_bytes(key)
    except FileNotFoundError:
        return None
    try:
        return BackupManifest.from_bytes(data, f"{reader.describe()}{key}")
    except ManifestError as exc:
        raise RestoreRefused(str(exc)) from None


def check_siblings(reader: OutputReader, me: NodeIdentity) -> None:
    """Every other node's backup must come from the same prompt file, split the same way."""
    for obj in reader.list():
        if not obj.key.endswith("/" + STATE_DIR + MANIFEST_NAME) and obj.key != STATE_DIR + MANIFEST_NAME:
            continue
        other = _read_manifest(reader, obj.key)
        if other is None or other.partition == me.partition_text:
            continue
        where = f"{reader.describe()}{obj.key}"
        if other.prompts_sha256 != me.prompts_sha256:
            raise RestoreRefused(
                f"job.prompts: {me.prompts_file} (sha256 {me.prompts_sha256[:12]}…) is not the "
                f"prompt file partition {other.partition} runs ({other.prompts_file}, sha256 "
                f"{other.prompts_sha256[:12]}…, {where}): every node of one job must split "
                "the same file")
        mine = me.partition.count if me.partition is not None else 1
        theirs = Partition.parse(other.partition).count if other.partition else 1
        if mine != theirs:
            raise RestoreRefused(
                f"job.partition: this node is {me.partition_text or 'unpartitioned'}, but "
                f"{where} is partition {other.partition or 'none'}: one output prefix holds one "
                "job split one way")


def restore_if_missing(reader: OutputReader, me: NodeIdentity, db_path: Path) -> BackupManifest | None:
    """With no state DB at `db_path`, put this partition's latest backup there. Returns the
    manifest restored, or None when there was nothing to restore (a fresh start)."""
    if db_path.exists():
        return None
    manifest = _read_manifest(reader, manifest_key(me.partition))
    if manifest is None:
        return None
    where = f"{reader.describe()}{manifest_key(me.partition)}"
    if manifest.partition != me.partition_text:
        raise RestoreRefused(f"{where} is a backup of partition {manifest.partition}, this node "
                             f"runs {me.partition_text}")
    if manifest.prompts_sha256 != me.prompts_sha256:
        raise RestoreRefused(
            f"{where} was made from another prompt file ({manifest.prompts_file}, sha256 "
            f"{manifest.prompts_sha256[:12]}…) than {me.prompts_file} (sha256 "
            f"{me.prompts_sha256[:12]}…): restore refused")
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = db_path.with_name(db_path.name + ".restoring")
    try:
        got = _download(reader, manifest, tmp)
        if got != manifest.db_sha256:
            raise RestoreRefused(f"{manifest.db_key}: its bytes (sha256 {got[:12]}…) "
                                 f"are not the backup's ({manifest.db_sha256[:12]}…)")
        try:
            info = inspect(tmp)
        except CopyError as exc:
            raise RestoreRefused(str(exc)) from None
        if info.partition != me.partition_text or info.prompts_sha256 != me.prompts_sha256:
            raise RestoreRefused(f"{manifest.db_key}: the DB inside belongs to partition "
                                 f"{info.partition} of prompts {str(info.prompts_sha256)[:12]}…, "
                                 "not this node's")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, db_path)
    log.warning("restored the state DB of partition %s from %s (%d of %d prompts done, "
                "backed up at %.0f)", me.partition_text, where, info.done, info.total,
                manifest.created_at)
    return manifest


def _download(reader: OutputReader, manifest: BackupManifest, dest: Path) -> str:
    """The backup's DB at `dest`, from its chunks (or its one object, format 1); returns the
    sha256 of what was written."""
    if not manifest.chunks:
        reader.download(manifest.db_key, dest)
        return file_sha256(dest)
    prefix = chunk_prefix(Partition.parse(manifest.partition) if manifest.partition else None)

    def parts() -> Iterator[tuple[str, bytes]]:
        for sha in manifest.chunks:
            try:
                yield sha, reader.read_bytes(prefix + sha)
            except FileNotFoundError:
                raise RestoreRefused(f"{reader.describe()}{prefix}{sha}: a chunk of the backup "
                                     f"{manifest.db_key} is missing") from None

    try:
        return assemble(parts(), dest)
    except ValueError as exc:
        raise RestoreRefused(f"{manifest.db_key}: {exc}, not the backup's") from None


def _line(raw: bytes) -> ShardLine:
    obj = json.loads(raw)
    *prompt, answer = obj["messages"]
    usage = obj["usage"]
    completion = Completion(answer["content"], answer.get("reasoning_content"),
                            obj["finish_reason"], usage["prompt_tokens"],
                            usage["completion_tokens"], usage["reasoning_tokens"])
    return ShardLine(obj["id"], prompt, completion, obj["max_tokens"], obj["model"],
                     obj["server"], obj["attempt"], obj["time"], loop=obj.get("loop"))


def adopt_uploaded(store: Store, reader: OutputReader, partition: Partition | None) -> list[str]:
    """Shards of this partition in the output that the DB does not have as uploaded: their
    lines become the DB's results (see state/shard_adoption.py). Returns the keys taken in."""
    uploaded = {s.key for s in store.shards() if s.status == "uploaded"}
    taken: list[str] = []
    prefix = partition_dir(partition)
    for obj in reader.list(prefix):
        parsed = parse_shard_key(obj.key)
        if parsed is None or parsed.partition != partition or obj.key in uploaded:
            continue
        data = reader.read_bytes(obj.key)
        try:
            lines = [_line(raw) for raw in data.splitlines()]
        except (ValueError, KeyError, TypeError) as exc:
            raise RestoreRefused(f"{reader.describe()}{obj.key}: a line cannot be read back "
                                 f"({exc}); move the object aside to regenerate it") from None
        shard = UploadedShard(parsed.seq, obj.key, len(data), hashlib.sha256(data).hexdigest(),
                              hashlib.md5(data).hexdigest(), obj.etag)
        try:
            adopt_shard(store, shard, lines)
        except AdoptionError as exc:
            raise RestoreRefused(str(exc)) from None
        taken.append(obj.key)
    if taken:
        log.warning("took back %d shards uploaded after the last backup: %s", len(taken),
                    ", ".join(taken[:5]) + (" ..." if len(taken) > 5 else ""))
    return taken
