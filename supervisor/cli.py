"""`dflash-supervisor`: the daemon's command line.

    run     --config PATH        run a job (what the systemd unit starts)
    demo    [--prompts N ...]    a whole job on simulated servers, no GPU needed
    import  PROMPTS --state DB   import a prompts file into a state DB
    check   --config PATH        validate a config, print each server's command line
    status  [--state DB]         live status from the control socket (the DB when no daemon answers)
    ctl     ACTION ...           act on the running daemon (max-tokens, pause, restart, ...)
    verify  --prompts F --output P   a whole (many-node) job's output checked from outside
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from typing import Sequence

from supervisor.config import ConfigError

EXIT_OK, EXIT_FAILED, EXIT_INCOMPLETE, EXIT_CONFIG = 0, 1, 3, 2


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # httpx logs every request at INFO: a million lines a day of noise.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def cmd_run(args: argparse.Namespace) -> int:
    import anyio

    from supervisor.config import load_config
    try:
        from supervisor.job import Job, JobError
        from supervisor.state_backup.node_state import BackupUnreachable
    except ImportError as exc:
        # A broken install (boto3, NVML bindings...) stops the start: never run a job that
        # cannot upload or watch its GPUs and call it finished.
        print(f"dflash-supervisor: broken installation: {exc}", file=sys.stderr)
        return EXIT_CONFIG

    _setup_logging(args.verbose)
    try:
        config = load_config(args.config, workdir=args.workdir)
    except ConfigError as exc:
        print(f"dflash-supervisor: invalid config: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if config.job.partition is not None:
        logging.getLogger("supervisor").info("this node runs partition %s", config.job.partition)
    job = Job(config, exit_when_paused=args.exit_when_paused,
              reload_config=functools.partial(load_config, args.config, workdir=args.workdir))
    try:
        result = anyio.run(job.run)
    except JobError as exc:
        print(f"dflash-supervisor: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except BackupUnreachable as exc:
        # Not the config's fault: the scheduler's retry (or systemd's) may find the store up.
        print(f"dflash-supervisor: {exc}", file=sys.stderr)
        return EXIT_FAILED
    s = result.status
    logging.getLogger("supervisor").info(
        "job %s: %d done, %d failed, %d pending of %d", result.reason, s.done, s.failed,
        s.remaining, s.total)
    # A requested stop (systemctl stop) is a clean exit: the next start resumes.
    if result.finished or result.reason.startswith("stopped by"):
        return EXIT_OK
    return EXIT_INCOMPLETE


def cmd_status(args: argparse.Namespace) -> int:
    from supervisor.control.commands import status_main
    return status_main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dflash-supervisor",
        description="Run a large LLM generation job on supervised SGLang servers.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a job from a TOML config")
    run.add_argument("--config", required=True, help="the job's TOML file")
    run.add_argument("--workdir", help="base of the config's relative paths (state, spool, logs) "
                     "instead of the config's directory: one config shared by many nodes")
    run.add_argument("--exit-when-paused", action="store_true",
                     help="stop (exit 3) instead of waiting for an operator when dispatch pauses")
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(func=cmd_run)

    demo = sub.add_parser("demo", help="a whole job on simulated servers (no GPU needed)",
                          add_help=False)
    demo.set_defaults(func=None, forward="demo")
    imp = sub.add_parser("import", help="import a prompts file into a state DB", add_help=False)
    imp.set_defaults(func=None, forward="import")
    check = sub.add_parser("check", help="validate a config and print the servers' commands",
                           add_help=False)
    check.set_defaults(func=None, forward="check")
    verify = sub.add_parser("verify", help="check a whole job's output against its prompt file",
                            add_help=False)
    verify.set_defaults(func=None, forward="verify")

    from supervisor.control.commands import add_status_arguments
    status = sub.add_parser("status", help="live status from the control socket, or the state DB")
    add_status_arguments(status)
    status.set_defaults(func=cmd_status)
    ctl = sub.add_parser("ctl", help="act on the running daemon through its control socket",
                         add_help=False)
    ctl.set_defaults(func=None, forward="ctl")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Subcommands that own their argument parsing get the rest of the line untouched.
    if argv and argv[0] in ("demo", "import", "check", "verify", "ctl"):
        rest = argv[1:]
        if argv[0] == "verify":
            from supervisor.output_verify.command import main as verify_main
            return verify_main(rest)
        if argv[0] == "ctl":
            from supervisor.control.commands import ctl_main
            return ctl_main(rest)
        if argv[0] == "demo":
            from supervisor.demo import main as demo_main
            return demo_main(rest)
        if argv[0] == "import":
            from supervisor.prompt_import import main as import_main
            return import_main(rest)
        from supervisor.check import main as check_main
        return check_main(rest)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
