"""`dflash-supervisor requeue --failed --state job.db [--reason-like TEXT]`

Sends failed prompts back to pending, e.g. after fixing a config that made every request fail
(max tokens past the context length). Each gets its full `max_attempts` again; the attempts
already used, the match and who asked (uid, pid) go into a `requeue_failed` event. Offline
only: beside a running daemon (the DB's only writer) it refuses, and the control socket's
action does the same through the daemon (the same Store method).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from state.offline_store import OfflineRefused, offline_store

    p = argparse.ArgumentParser(prog="dflash-supervisor requeue",
                                description="Send failed prompts back to pending (audited).")
    p.add_argument("--state", required=True, help="the job's SQLite state DB")
    p.add_argument("--failed", action="store_true", required=True,
                   help="requeue failed prompts (the only kind for now)")
    p.add_argument("--reason-like", metavar="TEXT",
                   help="only those whose error contains TEXT (matched literally)")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        with offline_store(args.state, when_locked="; stop it first (or use its control socket)"
                           ) as store:
            n = store.requeue_failed(args.reason_like, "cli",
                                     {"uid": os.getuid(), "pid": os.getpid()})
            left = store.counts().failed
    except OfflineRefused as exc:
        print(f"dflash-supervisor requeue: {exc}", file=sys.stderr)
        return 2
    match = f" matching {args.reason_like!r}" if args.reason_like else ""
    print(f"{n} failed prompts{match} are pending again ({left} still failed); "
          "the next `run` generates them")
    return 0
