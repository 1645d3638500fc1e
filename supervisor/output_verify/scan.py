"""The outside-in check of a whole job: the prompt file on one side, every shard of every
partition under the output prefix on the other.

Nothing is trusted from the nodes but what they wrote: ids come from the prompt file (the
same parser and stable hash the daemon uses), lines from the shard objects, and a shard's
bytes are compared with the digest its node recorded in its state backup (and, for a
single-part S3 object, with its ETag). Shards stream in chunks and ids go into a scratch
SQLite ledger, so memory stays flat for millions of lines.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from state.verify_ledger import VerifyLedger
from supervisor.config import Partition
from supervisor.output_verify.report import BadLine, ShardProblem, VerifyReport
from supervisor.prompts.prompt_import import ImportSummary, partition_of, read_prompts
from supervisor.shards.keys import ShardKey, parse_shard_key
from supervisor.state_backup.keys import is_state_key, manifest_key
from supervisor.state_backup.manifest import BackupManifest, ManifestError, ShardRecord
from supervisor.uploads.file_digest import file_sha256
from supervisor.uploads.output_reader import OutputReader, StoredObject

BATCH = 10_000
BAD_LINES_KEPT = 20
_PLAIN_MD5 = re.compile(r"^[0-9a-f]{32}$")
_BACKUP_OF = re.compile(r"^part-\d{4,}-of-(\d{4,})/_state/")


@dataclass(frozen=True)
class Progress:
    shards_done: int
    shards_total: int
    lines: int
    bytes: int


def _lines(chunks: Iterator[bytes], sha: hashlib._Hash, md5: hashlib._Hash
           ) -> Iterator[tuple[bytes, bool]]:
    """(line without its newline, whether it had one), hashing every byte on the way."""
    rest = b""
    for chunk in chunks:
        sha.update(chunk)
        md5.update(chunk)
        rest += chunk
        *complete, rest = rest.split(b"\n")
        for line in complete:
            yield line, True
    if rest:
        yield rest, False


def _line_id(line: bytes, had_newline: bool) -> str:
    """The line's prompt id, or ValueError saying why it is not a usable line."""
    if not had_newline:
        raise ValueError("last line has no newline (a truncated object?)")
    try:
        obj = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str) or not obj["id"]:
        raise ValueError("no string 'id'")
    msgs = obj.get("messages")
    if not isinstance(msgs, list) or not msgs or not isinstance(msgs[-1], dict) \
            or msgs[-1].get("role") != "assistant":
        raise ValueError("no assistant turn at the end of 'messages'")
    return obj["id"]


class OutputVerifier:
    def __init__(self, reader: OutputReader, prompts: Path, partitions: int | None = None,
                 scratch_dir: Path | None = None,
                 on_progress: Callable[[Progress], None] | None = None,
                 recorded: dict[str, ShardRecord] | None = None) -> None:
        self.reader = reader
        # Checksums from a node's state DB (`--state`), instead of its state backup.
        self.recorded = recorded
        # Partitions (None: a job without one) whose checksums nothing records: said once.
        self.unrecorded: set[int | None] = set()
        self.prompts = prompts
        self.partitions = partitions
        self.scratch_dir = scratch_dir
        self.on_progress = on_progress

    def run(self) -> VerifyReport:
        with tempfile.TemporaryDirectory(prefix="dflash-verify-", dir=self.scratch_dir) as tmp:
            ledger = VerifyLedger(Path(tmp) / "ledger.db")
            try:
                return self._run(ledger)
            finally:
                ledger.close()

    def _run(self, ledger: VerifyLedger) -> VerifyReport:
        shards, others, backed_up = self._listing()
        counts = {s.partition.count for s, _ in shards if s.partition is not None}
        unpartitioned = any(s.partition is None for s, _ in shards)
        # Nodes that have backed up but not uploaded a shard yet count too.
        counts |= backed_up
        n = self.partitions or (max(counts) if counts else 1)
        report = VerifyReport(self.reader.describe(), str(self.prompts), n)
        if len(counts) > 1 or (counts and unpartitioned):
            found = sorted(counts) + ([1] if unpartitioned else [])
            report.problems.append(f"shards from jobs split {found} ways share this prefix")
        if self.partitions and counts and counts != {self.partitions}:
            report.problems.append(f"--partitions {self.partitions}, but the shards are split "
                                   f"{sorted(counts)} ways")
        if others:
            report.notes.append(f"{len(others)} other objects ignored (e.g. {others[0]})")
        self._load_prompts(ledger, report)
        recorded = self.recorded if self.recorded is not None else \
            self._recorded(report, n, shards)
        self._read_shards(ledger, report, shards, recorded)
        listed = {obj.key for _, obj in shards}
        for key in sorted(set(recorded) - listed):
            report.bad_shards.append(ShardProblem(key, "recorded as uploaded, but not there"))
        report.expected = ledger.expected_total()
        report.present_once = ledger.present_once()
        report.missing = ledger.missing_by_partition()
        report.duplicated = ledger.duplicated()
        report.unexpected = ledger.unexpected()
        report.misplaced = ledger.misplaced()
        return report

    def _listing(self) -> tuple[list[tuple[ShardKey, StoredObject]], list[str], set[int]]:
        """Shards, other objects, and the partition counts the state backups name."""
        shards: list[tuple[ShardKey, StoredObject]] = []
        others: list[str] = []
        backed_up: set[int] = set()
        for obj in self.reader.list():
            if is_state_key(obj.key):
                m = _BACKUP_OF.match(obj.key)
                if m is not None:
                    backed_up.add(int(m.group(1)))
                continue
            parsed = parse_shard_key(obj.key)
            if parsed is None:
                others.append(obj.key)
            else:
                shards.append((parsed, obj))
        return shards, others, backed_up

    def _load_prompts(self, ledger: VerifyLedger, report: VerifyReport) -> None:
        summary = ImportSummary()
        batch: list[tuple[str, int]] = []
        n = report.partitions
        for row in read_prompts(self.prompts, summary):
            batch.append((row.id, partition_of(row.id, n) if n > 1 else 0))
            if len(batch) >= BATCH:
                ledger.add_expected(batch)
                batch.clear()
        ledger.add_expected(batch)
        if summary.rejected:
            report.notes.append(f"{summary.rejected} lines of the prompt file are not prompts "
                                f"(the daemon skips them too), first at line "
                                f"{summary.errors[0][0]}: {summary.errors[0][1]}")

    def _recorded(self, report: VerifyReport, n: int,
                  shards: list[tuple[ShardKey, StoredObject]]) -> dict[str, ShardRecord]:
        """Every partition's recorded shard digests, from its latest state backup."""
        parts: list[Partition | None] = [Partition(i, n) for i in range(n)] if n > 1 else [None]
        if n == 1 and any(s.partition is not None for s, _ in shards):
            parts = [Partition(0, 1)]
        prompts_sha = file_sha256(self.prompts)
        recorded: dict[str, ShardRecord] = {}
        for part in parts:
            key = manifest_key(part)
            label = f"partition {part}" if part is not None else "the job"
            try:
                manifest = BackupManifest.from_bytes(self.reader.read_bytes(key), key)
            except FileNotFoundError:
                # A job without state backups (a single node's default) recorded its shards'
                # digests only in its DB: their lines are still read and counted.
                report.notes.append(f"{label}: no state backup at {key}: its shards' checksums "
                                    "not checked (give --state DB to check them against the "
                                    "node's state DB)")
                self.unrecorded.add(part.index if part is not None else None)
                continue
            except ManifestError as exc:
                report.problems.append(str(exc))
                continue
            if manifest.prompts_sha256 != prompts_sha:
                report.problems.append(
                    f"{label} was generated from another prompt file ({manifest.prompts_file}, "
                    f"sha256 {manifest.prompts_sha256[:12]}…; this one is {prompts_sha[:12]}…)")
            recorded.update({s.key: s for s in manifest.shards})
        return recorded

    def _read_shards(self, ledger: VerifyLedger, report: VerifyReport,
                     shards: list[tuple[ShardKey, StoredObject]],
                     recorded: dict[str, ShardRecord]) -> None:
        seen: list[tuple[str, str, int | None]] = []
        for done, (parsed, obj) in enumerate(shards, 1):
            sha, md5 = hashlib.sha256(), hashlib.md5()
            lines = 0
            part = parsed.partition.index if parsed.partition is not None else None
            for lineno, (line, had_newline) in enumerate(
                    _lines(self.reader.chunks(obj.key), sha, md5), 1):
                lines += 1
                try:
                    seen.append((_line_id(line, had_newline), obj.key, part))
                except ValueError as exc:
                    report.bad_lines += 1
                    if len(report.bad_line_samples) < BAD_LINES_KEPT:
                        report.bad_line_samples.append(BadLine(obj.key, lineno, str(exc)))
                if len(seen) >= BATCH:
                    ledger.add_seen(seen)
                    seen.clear()
            report.shards += 1
            report.lines += lines
            report.bytes += obj.size
            if recorded.get(obj.key) is not None or part not in self.unrecorded:
                self._check_digest(report, obj, recorded.get(obj.key), sha.hexdigest(),
                                   md5.hexdigest(), lines)
            else:
                report.digests_unchecked += 1
                self._check_etag(report, obj, md5.hexdigest())
            if self.on_progress is not None:
                self.on_progress(Progress(done, len(shards), report.lines, report.bytes))
        ledger.add_seen(seen)

    @staticmethod
    def _check_etag(report: VerifyReport, obj: StoredObject, md5: str) -> bool:
        """False (and the problem reported) when a single-part object's ETag disagrees."""
        if obj.etag and _PLAIN_MD5.match(obj.etag) and obj.etag != md5:
            report.bad_shards.append(ShardProblem(
                obj.key, f"bytes have MD5 {md5}, the store's ETag says {obj.etag}"))
            return False
        return True

    @staticmethod
    def _check_digest(report: VerifyReport, obj: StoredObject, record: ShardRecord | None,
                      sha256: str, md5: str, lines: int) -> None:
        if not OutputVerifier._check_etag(report, obj, md5):
            return
        if record is None:
            report.bad_shards.append(ShardProblem(
                obj.key, "no recorded checksum (not uploaded by its node as far as its "
                         "record knows)"))
            return
        if record.sha256 != sha256:
            report.bad_shards.append(ShardProblem(
                obj.key, f"{obj.size} bytes with sha256 {sha256[:16]}…, recorded "
                         f"{record.bytes} bytes with sha256 {record.sha256[:16]}…"))
        elif record.records != lines:
            report.bad_shards.append(ShardProblem(
                obj.key, f"{lines} lines, recorded {record.records}"))
