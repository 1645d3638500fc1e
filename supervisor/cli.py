"""`dflash-supervisor`: the daemon's command line.

    run     --config PATH        run a job (what the systemd unit starts)
    demo    [--prompts N ...]    a whole job on simulated servers, no GPU needed
    import  PROMPTS --state DB   import a prompts file into a state DB
    check   --config PATH        validate a config, print each server's command line
    status  [--state DB]         live status from the control socket (the DB when no daemon answers)
    ctl     ACTION ...           act on the running daemon (max-tokens, pause, restart, ...)
    verify  --prompts F --output P   a whole (many-node) job's output checked from outside
    verify  --state DB           one job's output checked against its DB (exit 1 on a mismatch)
    requeue --failed --state DB  failed prompts back to pending (audited)
    rebuild-state --config PATH  a lost state DB rebuilt from the output and the prompts
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from typing import Sequence

from supervisor.config import ConfigError

# run's exit statuses (documented in README.md): 1 the state backup store is unreachable,
# 2 refused at start (config, paths, state DB, another daemon), 3 stopped unfinished, 4 finished
# but some prompts failed for good, 5 stopped by an error while running (disk full, ...), each
# with one line saying what.
EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_INCOMPLETE = 0, 1, 2, 3
EXIT_PROMPTS_FAILED, EXIT_ERROR = 4, 5


def _leaf_errors(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaf_errors(sub)]
    return [exc]


def one_line_error(exc: BaseException) -> str | None:
    """An operator's one line for an error from the running job, or None when it is a bug
    (then the traceback is what a developer needs)."""
    import sqlite3
    for leaf in _leaf_errors(exc):
        if isinstance(leaf, OSError):
            where = f"{leaf.filename}: " if leaf.filename else ""
            return f"{where}{leaf.strerror or leaf}"
        if isinstance(leaf, sqlite3.OperationalError):
            return f"state DB: {leaf}"
    return None


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # httpx logs every request at INFO: a million lines a day of noise.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def cmd_run(args: argparse.Namespace) -> int:
    import anyio

    from supervisor.config import check_gpus_exist, load_config
    try:
        from supervisor.gpu.nvml_source import node_gpu_count
        from supervisor.job.main_loop import Job
        from supervisor.job.store_setup import JobError
        from supervisor.state_backup.node_state import BackupUnreachable
    except ImportError as exc:
        # A broken install (boto3, NVML bindings...) stops the start: never run a job that
        # cannot upload or watch its GPUs and call it finished.
        print(f"dflash-supervisor: broken installation: {exc}", file=sys.stderr)
        return EXIT_CONFIG

    _setup_logging(args.verbose)
    try:
        config = load_config(args.config, workdir=args.workdir)
        check_gpus_exist(config, node_gpu_count())
        # Before the first launch: flags the installed SGLang's parser refuses stop the start.
        from supervisor.servers.flag_check import require_accepted_flags
        require_accepted_flags(config.servers)
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
    except ImportError as exc:
        # boto3 is first imported when the output is checked at start.
        print(f"dflash-supervisor: broken installation: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except Exception as exc:
        line = one_line_error(exc)
        if line is None:
            raise
        print(f"dflash-supervisor: stopped: {line} (state saved; fix it and run again)",
              file=sys.stderr)
        return EXIT_ERROR
    s = result.status
    logging.getLogger("supervisor").info(
        "job %s: %d done, %d failed, %d pending of %d", result.reason, s.done, s.failed,
        s.remaining, s.total)
    if result.finished and s.failed:
        print(f"dflash-supervisor: finished with {s.failed} failed prompts (see `status`; "
              "`dflash-supervisor requeue --failed` runs them again)", file=sys.stderr)
        return EXIT_PROMPTS_FAILED
    # A requested stop (systemctl stop) is a clean exit: the next start resumes.
    if result.finished or result.reason.startswith("stopped by"):
        return EXIT_OK
    return EXIT_INCOMPLETE


def cmd_status(args: argparse.Namespace) -> int:
    from supervisor.client.commands import status_main
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

    for name, text in (("requeue", "send failed prompts back to pending (audited)"),
                       ("rebuild-state", "rebuild a lost state DB from the output")):
        forwarded = sub.add_parser(name, help=text, add_help=False)
        forwarded.set_defaults(func=None, forward=name)

    from supervisor.client.commands import add_status_arguments
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
    if argv and argv[0] in ("demo", "import", "check", "verify", "ctl", "requeue",
                            "rebuild-state"):
        rest = argv[1:]
        if argv[0] == "verify":
            # Two modes: --state checks one job against its DB; --prompts/--output checks a
            # whole (many-node) output from the outside.
            if "--state" in rest or any(a.startswith("--state=") for a in rest):
                from supervisor.shards.verify_command import main as state_verify_main
                return state_verify_main(rest)
            from supervisor.output_verify.command import main as verify_main
            return verify_main(rest)
        if argv[0] == "ctl":
            from supervisor.client.commands import ctl_main
            return ctl_main(rest)
        if argv[0] == "requeue":
            from supervisor.requeue_command import main as requeue_main
            return requeue_main(rest)
        if argv[0] == "rebuild-state":
            from supervisor.shards.rebuild_state import main as rebuild_main
            return rebuild_main(rest)
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
