"""`dflash-supervisor COMMAND ...`: every command in one table.

Each command is a module whose `main(argv) -> exit status` parses its own arguments; it is
imported only when it runs, so `status` and `ctl` never load the daemon (and a broken
install of boto3 or NVML does not stop them).

    run     --config PATH        run a job (what the systemd unit starts)
    demo    [--prompts N ...]    a whole job on simulated servers, no GPU needed
    import  PROMPTS --state DB   import a prompts file into a state DB
    check   --config PATH        validate a config, print each server's command line
    status  [--state DB]         live status from the control socket (the DB when no daemon answers)
    ctl     ACTION ...           act on the running daemon (max-tokens, pause, restart, ...)
    verify  --prompts F --output P [--state DB]   a whole (many-node) job's output checked from outside
    verify  --state DB [--output P]   one job's output checked against its DB (exit 1 on a mismatch)
    requeue --failed --state DB  failed prompts back to pending (audited)
    rebuild-state --config PATH  a lost state DB rebuilt from the output and the prompts
    serve-server --spec PATH     exec one server from its spec file (the server units run it)
    stop-servers [--if-stopping UNIT]  stop every server unit (the daemon unit's ExecStopPost)
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys
from collections.abc import Callable, Sequence

# name -> (the module whose main(argv) runs it, one line for --help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("supervisor.commands.run", "run a job from a TOML config"),
    "demo": ("supervisor.commands.demo", "a whole job on simulated servers (no GPU needed)"),
    "import": ("supervisor.prompts.prompt_import", "import a prompts file into a state DB"),
    "check": ("supervisor.commands.check", "validate a config and print the servers' commands"),
    "status": ("supervisor.commands.status",
               "live status from the control socket, or the state DB"),
    "ctl": ("supervisor.commands.ctl",
            "act on the running daemon through its control socket"),
    "verify": ("supervisor.commands.verify_output",
               "check a whole job's output against its prompt file (--state DB: against "
               "its state DB)"),
    "requeue": ("supervisor.commands.requeue", "send failed prompts back to pending (audited)"),
    "rebuild-state": ("supervisor.shards.rebuild_state", "rebuild a lost state DB from the output"),
    "serve-server": ("supervisor.commands.serve_server",
                     "exec one server from its spec file (what dflash-sglang@.service runs)"),
    "stop-servers": ("supervisor.commands.stop_servers",
                     "stop every dflash-sglang@ server unit (the daemon unit's ExecStopPost)"),
}
# What a command whose reader went away (`... | head -1`) exits with: 128 + SIGPIPE, what a
# tool killed by SIGPIPE reports (the shell's pipefail reads it the same way).
EXIT_BROKEN_PIPE = 141

# `verify --state DB` checks one job against its DB; with --prompts, a whole (many-node) output
# from the outside (a DB given there only lends its shards' checksums).
VERIFY_STATE = "supervisor.commands.verify_state"


def entry_point(command: str, rest: Sequence[str]) -> Callable[[Sequence[str]], int]:
    module = COMMANDS[command][0]
    if command == "verify":
        from supervisor.commands.verify_forms import is_state_form
        if is_state_form(rest):
            module = VERIFY_STATE
    main: Callable[[Sequence[str]], int] = importlib.import_module(module).main
    return main


def build_parser() -> argparse.ArgumentParser:
    """Only for `--help` and a command line without a known command: each command parses
    its own arguments."""
    parser = argparse.ArgumentParser(
        prog="dflash-supervisor",
        description="Run a large LLM generation job on supervised SGLang servers.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, text) in COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; a reader of its output that went away ends it quietly."""
    try:
        try:
            return _run(list(sys.argv[1:] if argv is None else argv))
        finally:
            # Output still buffered meets the closed pipe here, not in the interpreter's
            # last flush (which can only print "Exception ignored"). Also after --help's exit.
            sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_gone():
            raise       # a socket or a child's pipe: a real error, not our reader leaving
        # Nothing more can reach the reader; the interpreter's own last flush must not try.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _run(argv: list[str]) -> int:
    if argv and argv[0] in COMMANDS:
        return entry_point(argv[0], argv[1:])(argv[1:])
    build_parser().parse_args(argv)      # --help, or a usage error naming the commands
    return 2


def _stdout_gone() -> bool:
    """stdout is a pipe (or socket) whose reader has closed it: poll says POLLERR/POLLHUP."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(main())
