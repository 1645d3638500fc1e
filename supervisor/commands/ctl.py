"""`dflash-supervisor ctl ACTION ...`: act on the running daemon through its control socket,
for scripts and for people without the TUI (max-tokens, requeue, pause, resume, restart,
retune, reset, log)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Sequence

from supervisor.client.control_client import (ControlClient, ControlProtocolError, ControlRefused,
                                              ControlUnreachable)
from supervisor.client.exit_codes import EXIT_CODES, EXIT_OK, PROG, fail
from supervisor.commands.status import socket_for
from supervisor.client.text import result_text
from supervisor.contract.codec import dumps


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{PROG} ctl", description="Act on a running daemon "
                                "through its control socket.", epilog=EXIT_CODES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", help="the daemon's control socket")
    p.add_argument("--state", help="find the socket beside this state DB")
    p.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = sub.add_parser("max-tokens", help="set max tokens for requests sent from now on")
    a.add_argument("value", type=int)
    how = a.add_mutually_exclusive_group()
    how.add_argument("--continue-truncated", action="store_true",
                     help="continue each answer truncated under a lower limit from its exact "
                     "tokens (decodes only what lies past the old limit)")
    how.add_argument("--requeue-truncated", action="store_true",
                     help="re-run the prompts truncated under a lower limit from scratch")
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    flags: dict[str, Any] = {}
    if args.action == "retune":
        try:
            flags = _retune_flags(args.flags)
        except ValueError as exc:
            parser.error(str(exc))
    path = socket_for(args.socket, args.state)
    calls: dict[str, Callable[[ControlClient], Any]] = {
        "max-tokens": lambda cl: cl.set_max_tokens(
            args.value, requeue_truncated=args.requeue_truncated,
            continue_truncated=args.continue_truncated),
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
            return fail(exc)
    if args.json:
        print(dumps(answer))
    elif args.action == "log":
        print("\n".join(answer.lines))
    else:
        print(result_text(answer))
    return EXIT_OK
