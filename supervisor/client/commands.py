"""`dflash-supervisor status` and `dflash-supervisor ctl ACTION ...`: the control socket from
the shell, for scripts and for people without the TUI.

Exit codes (ctl, and status without a DB to fall back on):
    0   done
    1   refused by the daemon (4xx): the reason is printed
    2   bad command line
    69  unreachable: no daemon answers on the socket (EX_UNAVAILABLE)
    76  the daemon's answer did not fit this client's contract (EX_PROTOCOL: version skew)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from supervisor.client.control_client import (ControlClient, ControlProtocolError, ControlRefused,
                                       ControlUnreachable, default_socket_path)
from supervisor.contract.codec import dumps
from supervisor.client.text import report, result_text

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_PROTOCOL = 0, 1, 2, 69, 76
PROG = "dflash-supervisor"


def socket_for(explicit: str | None, state: str | None) -> str:
    """--socket, else $DFLASH_SOCKET, else beside --state's DB when a socket is there (a
    job run by hand or the demo), else the systemd default."""
    if explicit:
        return explicit
    if os.environ.get("DFLASH_SOCKET"):
        return default_socket_path()
    if state:
        beside = Path(state).parent / "control.sock"
        if beside.exists():
            return str(beside)
    return default_socket_path()


def _fail(exc: Exception) -> int:
    print(f"{PROG}: {exc}", file=sys.stderr)
    if isinstance(exc, ControlRefused):
        return EXIT_REFUSED
    if isinstance(exc, ControlUnreachable):
        return EXIT_UNREACHABLE
    return EXIT_PROTOCOL


# -- status -----------------------------------------------------------------------------------

def status_main(args: argparse.Namespace) -> int:
    sockets = args.socket or []
    if len(sockets) > 1:
        from supervisor.client.fleet_status import fleet_status_main
        return fleet_status_main(args)
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
            return _fail(exc)
        return _offline(args, f"no daemon answers on {path} ({exc.reason})")
    except (ControlRefused, ControlProtocolError) as exc:
        return _fail(exc)
    if args.json:
        print(s.to_json(), flush=True)
    else:
        if args.watch is not None and sys.stdout.isatty():
            print("\x1b[H\x1b[2J", end="")
        print(report(s, path), flush=True)
    return EXIT_OK


def _offline(args: argparse.Namespace, why: str) -> int:
    from supervisor.offline_status import main as offline_main, summary_json

    if args.json:
        data = summary_json(args.state)
        if data is None:
            print(f"{PROG}: {args.state}: no such state DB", file=sys.stderr)
            return EXIT_USAGE
        print(json.dumps({"source": "state-db", "why": why, **data}), flush=True)
        return EXIT_OK
    print(f"from the state DB ({why}): live rates need the daemon", flush=True)
    return offline_main(args.state, args.events)


def add_status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state", help="the job's SQLite file (read when no daemon answers)")
    p.add_argument("--socket", action="append",
                   help="the daemon's control socket (default: beside --state's DB, "
                        "$DFLASH_SOCKET, or /run/dflash-supervisor/control.sock); give it once "
                        "per node for a many-node job's fleet table")
    p.add_argument("--json", action="store_true", help="the status contract as JSON")
    p.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="S",
                   help="refresh every S seconds (default 2) until Ctrl-C")
    p.add_argument("--events", type=int, default=10, help="recent events to show (DB view)")


# -- ctl --------------------------------------------------------------------------------------

def _flag_value(text: str) -> Any:
    """FLAG=VALUE: numbers, true/false and null (remove the flag) as JSON; anything else is
    a string, so `reasoning-parser=qwen3` needs no quotes."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (bool, int, float, str, list)) or value is None else text


def _retune_flags(pairs: list[str]) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"retune: expected FLAG=VALUE, got {pair!r}")
        flags[name.lstrip("-")] = _flag_value(value)
    return flags


def ctl_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{PROG} ctl", description="Act on a running daemon "
                                "through its control socket.", epilog=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", help="the daemon's control socket")
    p.add_argument("--state", help="find the socket beside this state DB")
    p.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = sub.add_parser("max-tokens", help="set max tokens for requests sent from now on")
    a.add_argument("value", type=int)
    a.add_argument("--requeue-truncated", action="store_true",
                   help="also re-run the prompts truncated under a lower limit")
    a = sub.add_parser("requeue-truncated", help="re-run prompts truncated below max tokens "
                       "(degenerate loops stay unless --include-loops)")
    a.add_argument("--include-loops", action="store_true",
                   help="also re-run the truncated answers that were looping")
    a = sub.add_parser("requeue-failed", help="re-run failed prompts")
    a.add_argument("--reason-like", help="only failures whose error contains this text")
    a = sub.add_parser("pause", help="stop dispatching (in-flight requests finish)")
    a.add_argument("reason", nargs="+")
    sub.add_parser("resume", help="lift the operator's (and the quality gate's) pause")
    a = sub.add_parser("restart", help="restart one server, or all one at a time")
    a.add_argument("server", nargs="?")
    a = sub.add_parser("retune", help="change server flags (rolling restart)")
    a.add_argument("flags", nargs="+", metavar="FLAG=VALUE", help="VALUE null removes a flag")
    a.add_argument("--server", help="only this server")
    a.add_argument("--add", action="store_true", help="allow flags the servers lack")
    a = sub.add_parser("reset", help="start a FAILED server again")
    a.add_argument("server")
    a = sub.add_parser("log", help="the tail of a server's log")
    a.add_argument("server")
    a.add_argument("-n", "--lines", type=int, default=50)
    return p


def ctl_main(argv: Sequence[str]) -> int:
    parser = ctl_parser()
    args = parser.parse_args(list(argv))
    flags: dict[str, Any] = {}
    if args.action == "retune":
        try:
            flags = _retune_flags(args.flags)
        except ValueError as exc:
            parser.error(str(exc))
    path = socket_for(args.socket, args.state)
    calls: dict[str, Callable[[ControlClient], Any]] = {
        "max-tokens": lambda cl: cl.set_max_tokens(
            args.value, requeue_truncated=args.requeue_truncated),
        "requeue-truncated": lambda cl: cl.requeue_truncated(include_loops=args.include_loops),
        "requeue-failed": lambda cl: cl.requeue_failed(args.reason_like),
        "pause": lambda cl: cl.pause(" ".join(args.reason)),
        "resume": lambda cl: cl.resume(),
        "restart": lambda cl: cl.restart(args.server),
        "retune": lambda cl: cl.retune(flags, server=args.server, add=args.add),
        "reset": lambda cl: cl.reset(args.server),
        "log": lambda cl: cl.log(args.server, args.lines),
    }
    with ControlClient(path) as client:
        try:
            answer = calls[args.action](client)
        except (ControlRefused, ControlUnreachable, ControlProtocolError) as exc:
            return _fail(exc)
    if args.json:
        print(dumps(answer))
    elif args.action == "log":
        print("\n".join(answer.lines))
    else:
        print(result_text(answer))
    return EXIT_OK
