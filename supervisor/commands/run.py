"""`dflash-supervisor run --config PATH`: run a job until it ends (what the systemd unit
starts), and turn how it ended into the exit status docs/commands.md documents."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Sequence

from supervisor.config import ConfigError

# run's exit statuses (documented in docs/commands.md): 1 the state backup store is unreachable,
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dflash-supervisor run",
                                description="Run a job from a TOML config (what the systemd "
                                            "unit starts).")
    p.add_argument("--config", required=True, help="the job's TOML file")
    p.add_argument("--workdir", help="base of the config's relative paths (state, spool, logs) "
                   "instead of the config's directory: one config shared by many nodes")
    p.add_argument("--exit-when-paused", action="store_true",
                   help="stop (exit 3) instead of waiting for an operator when dispatch pauses")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return _run(args)
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    import anyio

    from supervisor.config import check_gpus_exist, load_config
    try:
        from supervisor.gpu.nvml_source import node_gpu_count
        from supervisor.job.event_loop import backend_options
        from supervisor.job.main_loop import Job
        from supervisor.job.malloc_tuning import tune_malloc
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
        from supervisor.servers.flag_gate import require_accepted_flags
        if config.servers.own_servers:     # attached servers run their own job's flags
            require_accepted_flags(config.servers)
        from supervisor.job.attached_thinking import require_attached_parsers
        require_attached_parsers(config)
    except ConfigError as exc:
        print(f"dflash-supervisor: invalid config: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if config.job.partition is not None:
        logging.getLogger("supervisor").info("this node runs partition %s", config.job.partition)
    tune_malloc()               # before the job's threads start: see malloc_tuning.py
    job = Job(config, exit_when_paused=args.exit_when_paused,
              reload_config=functools.partial(load_config, args.config, workdir=args.workdir))
    try:
        result = anyio.run(job.run, backend_options=backend_options())
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
