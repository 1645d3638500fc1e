"""`dflash-supervisor verify --prompts FILE --output PREFIX [--state DB]`

Reads every shard of every partition under PREFIX (`s3://bucket/prefix/` or a directory) and
checks it against the prompt file: each usable prompt present exactly once, in its own
partition, every line parseable, every shard's bytes matching the digest its node recorded
(in its state backup, or in the state DB given with `--state`). A partition with neither (a
single-node job keeps no backup by default) has its checksums said once to be unchecked: not a
failure, since its lines are still read and counted.
Exit 0 only when complete and clean, 1 when not, 2 when it could not check (bad arguments,
unreachable store). Progress goes to stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from supervisor.config import UploadsSection
from supervisor.output_verify.scan import OutputVerifier, Progress
from supervisor.state_backup.manifest import ShardRecord
from supervisor.uploads.output_reader import output_reader
from supervisor.uploads.sink import UploadError

EXIT_CLEAN, EXIT_NOT_CLEAN, EXIT_ERROR = 0, 1, 2


class _ProgressLine:
    def __init__(self, stream: TextIO, interval_s: float = 2.0) -> None:
        self.stream, self.interval_s = stream, interval_s
        self.tty = stream.isatty()
        self._last = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        if now - self._last < self.interval_s and p.shards_done != p.shards_total:
            return
        self._last = now
        text = (f"verify: {p.shards_done}/{p.shards_total} shards, {p.lines} lines, "
                f"{p.bytes / 1e6:.1f} MB")
        self.stream.write(("\r" + text) if self.tty else (text + "\n"))
        if self.tty and p.shards_done == p.shards_total:
            self.stream.write("\n")
        self.stream.flush()


def build_parser() -> argparse.ArgumentParser:
    from supervisor.commands.verify_forms import FORMS, WHICH
    p = argparse.ArgumentParser(prog="dflash-supervisor verify", usage=FORMS, epilog=WHICH,
                                description="Check a whole (many-node) job's output against "
                                            "its prompt file, from the outside.")
    p.add_argument("--prompts", required=True, help="the job's JSONL prompt file")
    p.add_argument("--output", required=True, help="s3://bucket/prefix/ or a directory")
    p.add_argument("--state", help="take the shards' checksums from this (single-node) job's "
                                   "state DB instead of its state backup")
    p.add_argument("--endpoint-url", help="an S3-compatible endpoint")
    p.add_argument("--region", help="the bucket's region (else boto3's chain)")
    p.add_argument("--partitions", type=int, help="N, when no shard says it yet")
    p.add_argument("--scratch-dir", help="where the temporary id ledger goes (default $TMPDIR)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def recorded_shards(state: Path) -> dict[str, ShardRecord] | str:
    """The digests a state DB recorded for its written and uploaded shards, or why not."""
    from state.checked_open import StateDBError, open_checked
    from state.records import SHARD_UPLOADED, SHARD_WRITTEN

    try:
        # Read only: a daemon may be running this job right now.
        store = open_checked(state, create=False, probe_write=False)
    except StateDBError as exc:
        return str(exc)
    try:
        return {s.key: ShardRecord(s.key, s.records, s.bytes, s.sha256)
                for s in store.shards()
                if s.status in (SHARD_WRITTEN, SHARD_UPLOADED) and s.sha256 is not None}
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    prompts = Path(args.prompts)
    if not prompts.is_file():
        print(f"dflash-supervisor verify: {prompts}: no such file", file=sys.stderr)
        return EXIT_ERROR
    if args.partitions is not None and args.partitions < 1:
        print("dflash-supervisor verify: --partitions must be >= 1", file=sys.stderr)
        return EXIT_ERROR
    if not args.output.startswith("s3://") and not Path(args.output).is_dir():
        print(f"dflash-supervisor verify: {args.output}: no such directory", file=sys.stderr)
        return EXIT_ERROR
    try:
        reader = output_reader(args.output, UploadsSection(endpoint_url=args.endpoint_url,
                                                           region=args.region))
    except ValueError as exc:
        print(f"dflash-supervisor verify: {exc}", file=sys.stderr)
        return EXIT_ERROR
    recorded = None
    if args.state is not None:
        recorded = recorded_shards(Path(args.state))
        if isinstance(recorded, str):
            print(f"dflash-supervisor verify: {recorded}", file=sys.stderr)
            return EXIT_ERROR
    verifier = OutputVerifier(reader, prompts, args.partitions,
                              Path(args.scratch_dir) if args.scratch_dir else None,
                              None if args.quiet else _ProgressLine(sys.stderr), recorded)
    try:
        report = verifier.run()
    except (UploadError, OSError) as exc:
        print(f"dflash-supervisor verify: cannot read {args.output}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    code = EXIT_CLEAN if report.clean else EXIT_NOT_CLEAN
    try:
        print("\n".join(report.lines_out()), flush=True)
    except BrokenPipeError:
        # `verify ... | head`: the reader has what it wanted; the verdict is the exit status.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code
