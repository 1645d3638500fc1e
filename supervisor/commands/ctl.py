"""`dflash-supervisor ctl ACTION ...`: act on the running daemon through its control socket,
for scripts and for people without the TUI (max-tokens, requeue, pause, resume, restart,
retune, reset, log, tune start/stop).

Each subcommand is an entry of the control API's table (contract/api.py) by name, and its
arguments are named after the fields of the entry's request record: the record is built
from them and sent with the client's generic `call`. A new action needs only its
subparser here (and a line in client/text.result_text)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any

from supervisor.client.control_client import (
    ControlClient,
    ControlProtocolError,
    ControlRefused,
    ControlUnreachable,
)
from supervisor.client.exit_codes import EXIT_CODES, EXIT_OK, PROG, fail
from supervisor.client.flag_space import SpaceSyntaxError, join_space, parse_range
from supervisor.client.text import result_text
from supervisor.commands.status import socket_for
from supervisor.contract.actions import FlagSetting, LogTail
from supervisor.contract.api import ENDPOINTS, Endpoint
from supervisor.contract.codec import dumps

_BY_NAME = {e.name: e for e in ENDPOINTS}


def _flag_value(text: str) -> Any:
    """FLAG=VALUE: numbers, true/false and null (remove the flag) as JSON; anything else is
    a string, so `reasoning-parser=qwen3` needs no quotes."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (bool, int, float, str, list)) or value is None else text


def _flag_setting(pair: str) -> FlagSetting:
    name, sep, value = pair.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"retune: expected FLAG=VALUE, got {pair!r}")
    return FlagSetting(name.lstrip("-"), _flag_value(value))


def request_of(endpoint: Endpoint[Any, Any], args: argparse.Namespace) -> Any:
    """The entry's request record from the subcommand's arguments of the same names."""
    given = vars(args)
    values = {f.name: given[f.name] for f in dataclasses.fields(endpoint.request)
              if f.name in given}
    return endpoint.request(**values)


class _Words(argparse.Action):
    """A reason given as several words is one text."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, " ".join(values))


class _Flags(argparse.Action):
    """A flag given twice is sent once, with its last value."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, tuple({f.name: f for f in values}.values()))


def _flag_range(spec: str) -> Any:
    try:
        return parse_range(spec)
    except SpaceSyntaxError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _trials(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of trials above 0, got {text!r}")
    return n


class _Space(argparse.Action):
    """`--space A=1,2 B=3,4` and `--space A=1,2 --space B=3,4` are one space; a flag named
    twice is refused."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        try:
            space = join_space([*(getattr(namespace, self.dest) or ()), *values])
        except SpaceSyntaxError as exc:
            parser.error(f"argument --space: {exc}")
        setattr(namespace, self.dest, space)


def _tune_start_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("--space", nargs="+", type=_flag_range, action=_Space, default=(),
                   metavar="FLAG=V1,V2", help="the flags to search and their values in the "
                   "order tried (default: [tune] or the built-in space)")
    a.add_argument("--server", help="the canary (default: the tuner picks one)")
    a.add_argument("--max-trials", type=_trials, metavar="N", help="the trial budget (default: [tune])")
    a.add_argument("--force", action="store_true",
                   help="tune even where the remaining job does not pay for a trial")


def _tune_parsers(sub: Any) -> None:
    """`tune start` / `tune stop` as the issue spells them, and the table's own names
    `tune-start` / `tune-stop`; `entry` says which table entry a parser stands for."""
    start_help = "start the canary search for faster server flags"
    stop_help = "stop the search; the canary goes back to the best flags known"
    tune = sub.add_parser("tune", help="the tuner: start or stop its search")
    verbs = tune.add_subparsers(dest="verb", required=True, metavar="start|stop")
    for parent, start, stop in ((verbs, "start", "stop"), (sub, "tune-start", "tune-stop")):
        a = parent.add_parser(start, help=start_help)
        _tune_start_arguments(a)
        a.set_defaults(entry="tune-start")
        parent.add_parser(stop, help=stop_help).set_defaults(entry="tune-stop")


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
    a.add_argument("--include-loops", action="store_true",
                   help="with --continue-truncated: continue the looping answers too")
    a = sub.add_parser("requeue-truncated", help="re-run prompts truncated below max tokens "
                       "(degenerate loops stay unless --include-loops)")
    a.add_argument("--include-loops", action="store_true",
                   help="also re-run the truncated answers that were looping")
    a = sub.add_parser("requeue-failed", help="re-run failed prompts")
    a.add_argument("--reason-like", help="only failures whose error contains this text")
    a = sub.add_parser("pause", help="stop dispatching (in-flight requests finish)")
    a.add_argument("reason", nargs="+", action=_Words)
    sub.add_parser("resume", help="lift the operator's (and the quality gate's) pause")
    a = sub.add_parser("restart", help="restart one server, or all one at a time")
    a.add_argument("server", nargs="?")
    a = sub.add_parser("retune", help="change server flags (rolling restart)")
    a.add_argument("flags", nargs="+", type=_flag_setting, action=_Flags, metavar="FLAG=VALUE",
                   help="VALUE null removes a flag")
    a.add_argument("--server", help="only this server")
    a.add_argument("--add", action="store_true", help="allow flags the servers lack")
    a = sub.add_parser("reset", help="start a FAILED server again")
    a.add_argument("server")
    a = sub.add_parser("log", help="the tail of a server's log")
    a.add_argument("server")
    a.add_argument("-n", "--lines", type=int, default=50)
    _tune_parsers(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    endpoint = _BY_NAME[getattr(args, "entry", None) or args.action]
    request = request_of(endpoint, args)
    with ControlClient(socket_for(args.socket, args.state)) as client:
        try:
            answer = client.call(endpoint, request)
        except (ControlRefused, ControlUnreachable, ControlProtocolError) as exc:
            return fail(exc)
    if args.json:
        print(dumps(answer))
    elif isinstance(answer, LogTail):
        print("\n".join(answer.lines))
    else:
        print(result_text(answer))
    return EXIT_OK
