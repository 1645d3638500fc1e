"""The output is checked, not trusted: every shard the DB calls written or uploaded is compared
with what the output really holds, and shards the DB does not know are found.

- written (bytes in the spool, or in a local output): the file's size, then its SHA-256;
- uploaded: the destination's own check (a local file is hashed; an S3 object is HEADed for
  its size and ETag, and read back whole on demand);
- a shard found missing or changed goes back to 'assigned' with a `shard_mismatch` event: the
  writer rebuilds its bytes from the DB and the uploader sends them out again;
- shard keys in the output that the DB has never assigned mean the DB is new, reset or behind
  its output; the daemon refuses to start over them (it would overwrite finished work).
A store that cannot be reached is "unverified", never a mismatch: an outage is not a change.
Run at the start and the end of every job and by `dflash-supervisor verify`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from state.records import SHARD_UPLOADED, SHARD_WRITTEN
from state.settings_keys import Setting
from state.store import Store
from supervisor.config import JobConfig, Partition
from supervisor.uploads.local_files import check_file, list_shard_files
from supervisor.uploads.sink import Sink, UploadError

log = logging.getLogger("supervisor.shards")

# Where this job's shards go, kept in the DB for `dflash-supervisor verify --state DB`.


def key_prefix(partition: Partition | None) -> str:
    """The folder this job's shard keys live in ("" without a partition)."""
    return "" if partition is None else f"part-{partition.index:04d}-of-{partition.count:04d}/"


def _ours(key: str, prefix: str) -> bool:
    # Nodes share one prefix: another partition's part-…/ keys are not this job's.
    return key.startswith(prefix) and "/" not in key[len(prefix):]


@dataclass(frozen=True)
class ShardFinding:
    shard_id: int
    key: str
    status: str
    why: str


@dataclass
class DbVerifyReport:
    """One node's output checked against its state DB (output_verify's VerifyReport is a
    whole job's output checked against the prompt file)."""
    checked: int = 0
    mismatched: list[ShardFinding] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)
    unknown_keys: list[str] = field(default_factory=list)
    listed: bool = False        # whether the output could be listed at all

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.unverified or self.unknown_keys)

    def summary(self) -> str:
        text = f"{self.checked} shards checked, {len(self.mismatched)} missing or changed"
        if self.unverified:
            text += f", {len(self.unverified)} could not be checked"
        if self.unknown_keys:
            text += f", {len(self.unknown_keys)} in the output unknown to the DB"
        return text


def verify_output(store: Store, sink: Sink, spool: Path | None, partition: Partition | None,
                  *, read_back: bool = False, list_output: bool = True) -> DbVerifyReport:
    """Blocking (hashes files, talks to S3): call from a worker thread. A `spool` of None
    (a DB checked away from its node) leaves shards written but not yet uploaded unchecked:
    they are on that node's disk, and not finding them here is no sign of damage."""
    report = DbVerifyReport()
    for shard in store.shards():
        if shard.status not in (SHARD_WRITTEN, SHARD_UPLOADED) or shard.sha256 is None:
            continue
        report.checked += 1
        try:
            if shard.status == SHARD_WRITTEN and sink.remote:
                if spool is None:
                    report.unverified.append(f"{shard.key}: written but not uploaded, in the "
                                             "spool of the node that ran the job")
                    continue
                why = check_file(spool / shard.key, shard.bytes, shard.sha256)
            else:
                why = sink.check(shard.key, shard.bytes, shard.sha256, shard.etag, read_back)
        except (UploadError, OSError) as exc:
            report.unverified.append(f"{shard.key}: {exc}")
            continue
        if why is not None:
            report.mismatched.append(ShardFinding(shard.id, shard.key, shard.status, why))
    if list_output:
        prefix = key_prefix(partition)
        try:
            keys = set(sink.list_keys(prefix))
            if sink.remote and spool is not None:
                keys |= set(list_shard_files(spool, prefix))
            report.listed = True
        except (UploadError, OSError) as exc:
            report.unverified.append(f"listing {sink.describe()}: {exc}")
            keys = set()
        known = store.shard_keys()
        report.unknown_keys = sorted(k for k in keys if _ours(k, prefix) and k not in known)
    return report


def send_back(store: Store, report: DbVerifyReport, actor: str) -> int:
    """Every mismatched shard back to 'assigned' (with its event); returns how many."""
    n = 0
    for f in report.mismatched:
        if store.reassign_shard(f.shard_id, f.why, actor):
            log.warning("shard %s (%s): %s; rewriting it from the DB", f.key, f.status, f.why)
            n += 1
    return n


def unknown_output_message(report: DbVerifyReport, state_path: Path, output: str) -> str:
    n = len(report.unknown_keys)
    first = ", ".join(report.unknown_keys[:3])
    shards = "1 shard" if n == 1 else f"{n} shards"
    return (f"job.output: {output} holds {shards} of this job that the state DB "
            f"{state_path} does not know (first: {first}): the DB is new, was reset or is "
            "older than its output, and running would overwrite finished work. Restore the DB "
            "from a backup, rebuild it from the output with `dflash-supervisor rebuild-state "
            "--config CONFIG`, or move the output aside to start over")


class UnknownOutput(RuntimeError):
    """The output holds shards of this job that the DB never assigned."""


def check_output_at_start(store: Store, config: JobConfig) -> DbVerifyReport:
    """Before anything runs: refuse (UnknownOutput) an output holding shards this DB never
    assigned, and send every written or uploaded shard that is missing or changed back to be
    rewritten. Records where the output is, for `verify`. Blocking."""
    from supervisor.shards.keys import spool_dir
    from supervisor.uploads.wiring import build_sink, output_location

    spool = spool_dir(config)
    report = verify_output(store, build_sink(config, spool), spool, config.job.partition)
    if report.unknown_keys:
        where = config.job.output if config.output_is_s3 else str(config.path(config.job.output))
        raise UnknownOutput(unknown_output_message(report, store.path, where))
    store.set_setting(Setting.OUTPUT_LOCATION, output_location(config, spool, store.path))
    for problem in report.unverified:
        log.warning("could not verify a shard at start: %s", problem)
    sent = send_back(store, report, "supervisor")
    log.info("output checked at start: %s%s", report.summary(),
             f"; {sent} shards to rewrite" if sent else "")
    return report
