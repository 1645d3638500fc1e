"""`dflash-supervisor status [--state DB] [--socket S ...] [--json] [--watch [S]]`: the live
status from the daemon's control socket; the state DB's figures when no daemon answers and a
DB is given; a table of every node when several sockets are given (fleet_status.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from supervisor.client.control_client import (
    ControlClient,
    ControlProtocolError,
    ControlRefused,
    ControlUnreachable,
    default_socket_path,
)
from supervisor.client.exit_codes import EXIT_OK, EXIT_USAGE, PROG, fail
from supervisor.client.text import report


def socket_for(explicit: str | None, state: str | None) -> str:
    """--socket, else $DFLASH_SOCKET, else with --state: the socket beside that DB (a job
    run by hand, the demo) when it is there, the systemd one (/run/...) when that is there,
    and when neither is, the one beside the DB, which a daemon of that DB run by hand makes
    (so "no daemon answers on ..." names the job's own place); without --state the systemd
    default."""
    if explicit:
        return explicit
    if os.environ.get("DFLASH_SOCKET"):
        return default_socket_path()
    if state:
        beside = Path(state).parent / "control.sock"
        if beside.exists() or not Path(default_socket_path()).exists():
            return str(beside)
    return default_socket_path()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{PROG} status",
                                description="Live status from the control socket, or the state "
                                            "DB when no daemon answers.")
    p.add_argument("--state", help="the job's SQLite file (read when no daemon answers)")
    p.add_argument("--socket", action="append",
                   help="the daemon's control socket (default: beside --state's DB, "
                        "$DFLASH_SOCKET, or /run/dflash-supervisor/control.sock); give it once "
                        "per node for a many-node job's fleet table")
    p.add_argument("--json", action="store_true", help="the status contract as JSON")
    p.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="S",
                   help="refresh every S seconds (default 2) until Ctrl-C")
    p.add_argument("--events", type=int, default=10, help="recent events to show (DB view)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return _status(args)
    except KeyboardInterrupt:
        return 130


def _status(args: argparse.Namespace) -> int:
    sockets = args.socket or []
    if len(sockets) > 1:
        from supervisor.commands.fleet_status import fleet_status
        return fleet_status(args)
    path = socket_for(sockets[0] if sockets else None, args.state)
    with ControlClient(path, timeout_s=5.0) as client:
        if args.watch is None:
            return _status_once(client, path, args)
        try:
            while True:
                code = _status_once(client, path, args)
                if code != EXIT_OK:
                    return code
                time.sleep(args.watch)
        except KeyboardInterrupt:
            return EXIT_OK          # Ctrl-C is how a watch ends


def _status_once(client: ControlClient, path: str, args: argparse.Namespace) -> int:
    try:
        s = client.status()
    except ControlUnreachable as exc:
        if not args.state:
            return fail(exc)
        return _offline(args, f"no daemon answers on {path} ({exc.reason})")
    except (ControlRefused, ControlProtocolError) as exc:
        return fail(exc)
    if args.json:
        print(s.to_json(), flush=True)
    else:
        if args.watch is not None and sys.stdout.isatty():
            print("\x1b[H\x1b[2J", end="")
        print(report(s, path), flush=True)
    return EXIT_OK


def _offline(args: argparse.Namespace, why: str) -> int:
    from state.checked_open import StateDBError
    from supervisor.commands.offline_status import main as offline_main
    from supervisor.commands.offline_status import summary_json

    if args.json:
        try:
            data = summary_json(args.state)
        except StateDBError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(json.dumps({"source": "state-db", "why": why, **data}), flush=True)
        return EXIT_OK
    return offline_main(args.state, args.events,
                        header=f"from the state DB ({why}): live rates need the daemon")
