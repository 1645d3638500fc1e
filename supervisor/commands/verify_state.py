"""`dflash-supervisor verify --state job.db [--output PATH] [--read-back] [--integrity]`

Checks one job's output against its state DB, as the daemon does at the start and end of a
job (supervisor/shards/verify.py): every written or uploaded shard is where the DB says, with
the size and digest it recorded, and the output holds no shard the DB does not know. The
output's location comes from the DB (the daemon records it at start), so no config is needed;
`--output` names another (a copy of the job's output, a moved one). The DB also records where
it was itself: a DB that has been copied or moved since is refused without `--output`, since
the output recorded in it need not be the one beside it, and a check of the original would
pass a damaged copy.
`--read-back` reads S3 objects whole instead of trusting HEAD's size and ETag; `--integrity`
runs SQLite's full integrity_check on the DB first.

When no daemon runs the job, shards found missing or changed are marked to be rewritten at
the next start (with an event each); beside a running daemon nothing is written (it checks
everything again at the end of the job).

Exit status: 0 everything checked and clean, 1 something missing, changed, unknown or not
checkable, 2 the DB cannot be used.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_CLEAN, EXIT_NOT_CLEAN, EXIT_ERROR = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    from supervisor.commands.verify_forms import FORMS, WHICH
    p = argparse.ArgumentParser(prog="dflash-supervisor verify", usage=FORMS, epilog=WHICH,
                                description="Check a job's output against its state DB.")
    p.add_argument("--state", required=True, help="the job's SQLite state DB")
    p.add_argument("--output", help="the output to check (a directory or s3://bucket/prefix/); "
                                    "default: the one the DB recorded, if the DB has not moved")
    p.add_argument("--read-back", action="store_true",
                   help="read S3 objects whole and compare SHA-256 (default: HEAD size + ETag)")
    p.add_argument("--integrity", action="store_true",
                   help="run SQLite's full integrity_check on the DB first")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from state.checked_open import StateDBError, open_checked
    from state.job_lock import JobLock, JobLocked
    from state.settings_keys import Setting
    from supervisor.shards.verify import send_back, verify_output
    from supervisor.uploads.wiring import build_sink, config_for_output

    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    state = Path(args.state)
    lock: JobLock | None = JobLock(state)
    try:
        lock.acquire()
    except JobLocked as exc:
        print(f"verify: {exc}: checking without writing anything", file=sys.stderr)
        lock = None
    except OSError:
        lock = None        # a read-only place: checking still works
    try:
        try:
            store = open_checked(state, create=False, full_check=args.integrity,
                                 probe_write=lock is not None)
        except StateDBError as exc:
            print(f"dflash-supervisor verify: {exc}", file=sys.stderr)
            return EXIT_ERROR
        if args.integrity:
            print(f"{state}: SQLite integrity_check: ok")
        try:
            location = store.get_setting(Setting.OUTPUT_LOCATION)
            if location is None:
                print(f"dflash-supervisor verify: {state}: no output recorded (the job never "
                      "started under this version)", file=sys.stderr)
                return EXIT_ERROR
            target = output_to_check(location, state, args.output)
            if isinstance(target, str):
                print(f"dflash-supervisor verify: {target}", file=sys.stderr)
                return EXIT_ERROR
            config, spool = config_for_output(target[0])
            spool = spool if target[1] else None
            report = verify_output(store, build_sink(config, spool), spool,
                                   config.job.partition, read_back=args.read_back)
            for f in report.mismatched:
                print(f"{f.key} ({f.status}): {f.why}")
            for key in report.unknown_keys:
                print(f"{key}: in the output, unknown to the DB")
            for problem in report.unverified:
                print(f"not checked: {problem}")
            print(f"{config.job.output}: {report.summary()}")
            if report.mismatched:
                if lock is not None:
                    n = send_back(store, report, "verify")
                    print(f"{n} shards will be rewritten at the next start of the job")
                else:
                    print("the running daemon rewrites them at the end of the job")
        finally:
            # Holding the job lock it is the DB's writer: leave it readable to auditors.
            store.close_for_readers() if lock is not None else store.close()
    finally:
        if lock is not None:
            lock.release()
    return EXIT_CLEAN if report.ok else EXIT_NOT_CLEAN


def output_to_check(location: str, state: Path, output: str | None) -> tuple[str, bool] | str:
    """The output location to check (as recorded, or with `output` put in) and whether its
    spool is known here; or why not, in one line."""
    data = json.loads(location)
    ran_at = data.get("state")
    moved = ran_at is not None and Path(ran_at) != state.resolve()
    if output is None:
        if moved:
            return (f"{state}: the job ran with its DB at {ran_at} and its output at "
                    f"{data['output']}; this DB has been copied or moved since, so that output "
                    "need not be the one beside it: name the output to check with --output PATH")
        return location, True
    if output.startswith("s3://"):
        data["output"] = output
        # The spool (shards written, not yet uploaded) is on the disk of the node that ran
        # the job: known only where the DB still is.
        return json.dumps(data), not moved
    if not Path(output).is_dir():
        return f"--output {output}: no such directory"
    # A local output is its own spool: shards are written straight into it.
    data["output"] = data["spool"] = str(Path(output).resolve())
    return json.dumps(data), True
