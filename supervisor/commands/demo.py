"""`dflash-supervisor demo`: a whole job on simulated SGLang servers, no GPU needed.

It writes a built-in prompt set and a job config into its directory, starts K simulated
servers as real child processes on loopback (launched exactly as real SGLang would be),
and runs the same Job the daemon runs, with a live progress line. Run it again on the same
directory and it resumes; after a SIGKILL the next run first stops the servers the killed
run left behind.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from supervisor.config import ConfigError, JobConfig
from supervisor.demo.config import (
    DEMO_TIME_SCALE,
    DEMO_TOKENS_PER_S,
    demo_config,
    write_config_file,
)
from supervisor.demo.free_ports import free_base_port, reusable_base_port
from supervisor.demo.progress import REDRAW, ProgressPrinter

log = logging.getLogger("supervisor.demo")


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dflash-supervisor demo",
                                description="Run a whole job on simulated SGLang servers.")
    p.add_argument("--prompts", type=int, default=3000, help="synthetic prompts (default 3000)")
    p.add_argument("--servers", type=int, default=3, help="simulated servers (default 3)")
    p.add_argument("--dir", default="demo-output", help="job directory (default ./demo-output)")
    p.add_argument("--output", default=None,
                   help="where shards go: a directory (default DIR/shards) or s3://bucket/prefix/")
    p.add_argument("--endpoint-url", default=None, help="S3-compatible endpoint for s3:// output")
    p.add_argument("--max-tokens", type=int, default=4096,
                   help="the job's starting max tokens per answer (default 4096: some of the "
                        "demo's answers are longer and get truncated; raise it live with m "
                        "under --tui)")
    p.add_argument("--time-scale", type=float, default=DEMO_TIME_SCALE,
                   help=f"simulated seconds per wall second (default {DEMO_TIME_SCALE:g}: "
                        "higher runs the demo faster)")
    p.add_argument("--instant", action="store_true", help="servers answer at once (benchmarks)")
    p.add_argument("--empty-rate", type=float, default=0.0,
                   help="share of empty completions the servers return (default 0; 0.9 trips "
                        "the quality gate)")
    p.add_argument("--loop-share", type=float, default=0.25,
                   help="share of the long answers that loop forever (flagged, not requeued; "
                        "default 0.25, 0 for none)")
    p.add_argument("--fault", choices=("none", "crash", "oom", "hang", "stall", "collapse"),
                   default="none",
                   help="make every server fail this way after --fault-after-s (collapse: "
                        "alive but decoding 8x slower; the saturation guard lowers the limit)")
    p.add_argument("--fault-after-s", type=float, default=10.0,
                   help="wall seconds after each server is ready before --fault strikes, "
                        "again after each restart (default 10)")
    p.add_argument("--fault-after-answers", type=int, default=None, metavar="N",
                   help="strike at each server life's Nth answer instead of after a time: a "
                        "life that always serves before it dies, however busy the machine")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--tui", action="store_true",
                   help="run the daemon in the background and watch it in dflash-tui "
                        "(quitting the TUI stops the demo)")
    args = p.parse_args(argv)
    if args.prompts < 1 or args.servers < 1:
        p.error("--prompts and --servers must be >= 1")
    if args.fault_after_answers is not None and args.fault_after_answers < 1:
        p.error("--fault-after-answers must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    import anyio

    from supervisor.demo.prompts import write_demo_prompts
    from supervisor.job.event_loop import backend_options
    from supervisor.job.main_loop import Job
    from supervisor.job.store_setup import JobError

    args = _parse(list(sys.argv[1:] if argv is None else argv))
    directory = Path(args.dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    _log_to_file(directory / "daemon.log")
    prompts_file = directory / f"prompts-{args.prompts}.jsonl"
    write_demo_prompts(prompts_file, args.prompts)
    sim_flags: dict[str, Any] = {"sim-tokens-per-s": DEMO_TOKENS_PER_S,
                                 "sim-time-scale": args.time_scale, "sim-startup-s": 20.0}
    if args.instant:
        sim_flags["sim-instant"] = True
    if args.empty_rate:
        sim_flags["sim-empty-rate"] = args.empty_rate
    if args.loop_share:
        sim_flags["sim-loop-share"] = args.loop_share
    if args.fault != "none":
        sim_flags["sim-fault"] = args.fault
        if args.fault_after_answers is not None:
            sim_flags["sim-fault-after-requests"] = args.fault_after_answers
        else:
            sim_flags["sim-fault-after-s"] = args.fault_after_s * args.time_scale
    try:
        cfg = demo_config(directory, servers=args.servers, prompts_file=prompts_file,
                          output=args.output or "shards", max_tokens=args.max_tokens,
                          sim_flags=sim_flags, endpoint_url=args.endpoint_url,
                          base_port=_base_port(directory / "demo.toml", args.servers))
    except ConfigError as exc:
        print(f"dflash-supervisor demo: {exc}", file=sys.stderr)
        return 2
    write_config_file(directory / "demo.toml", cfg)
    if args.tui:
        from supervisor.demo.with_tui import run_with_tui
        return run_with_tui(directory / "demo.toml", cfg.control.socket,
                            directory / "daemon.log")
    out = cfg.job.output if cfg.output_is_s3 else str(cfg.path(cfg.job.output))
    print(f"demo: {args.prompts} prompts, {args.servers} simulated servers, shards -> {out}"
          f"\n      state {cfg.path(cfg.job.state)}, logs {directory / 'logs'}", flush=True)
    printer = None if args.quiet else ProgressPrinter(sys.stdout, 5.0)
    job = Job(cfg, exit_when_paused=True, on_status=printer)
    started = time.monotonic()
    started_at = time.time()
    try:
        result = anyio.run(job.run, backend_options=backend_options())
    except JobError as exc:
        print(f"dflash-supervisor demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        if printer is not None:
            printer.end()
    _summary(result, cfg, time.monotonic() - started, started_at)
    return 0 if result.finished else 3


def _base_port(previous: Path, servers: int) -> int:
    """The earlier run's ports where they can be taken again, so a demo daemon that was
    killed is followed by one that finds (and adopts) the servers it left; else new ones."""
    return reusable_base_port(previous, servers) or free_base_port(servers)


def _log_to_file(path: Path) -> None:
    # The terminal gets the progress line and warnings; the full log goes to a file.
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    fh = logging.FileHandler(path)
    fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(fh)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    # On a terminal a warning takes the progress line's place (the next redraw puts the line
    # back under it); in a pipe it is a line of its own.
    lead = REDRAW if sys.stderr.isatty() else ""
    err.setFormatter(logging.Formatter(lead + "%(levelname)s: %(message)s"))
    root.addHandler(err)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _summary(result: Any, cfg: JobConfig, wall_s: float, started_at: float) -> None:
    from state.checked_open import open_for_reading
    from supervisor.contract.event_kinds import EventKind
    from supervisor.demo.summary import failures_by_server, summary_lines

    store = open_for_reading(cfg.path(cfg.job.state))
    try:
        # A demo's run has a few dozen state changes per server: the latest 10,000 cover it.
        events = store.recent_events(10_000, kind=EventKind.SERVER_STATE)
    finally:
        store.close()
    u = result.status.uploads
    uploads = None
    if cfg.output_is_s3 and u is not None:
        state = f"STOPPED: {u.stopped}" if u.stopped else (
            f"last error: {u.last_error}" if u.backlog_shards and u.last_error else "ok")
        uploads = (f"{u.uploaded_shards} shards verified in {u.destination} "
                   f"({u.uploaded_bytes / 1e6:.1f} MB), {u.backlog_shards} waiting; {state}")
    where = cfg.job.output if cfg.output_is_s3 else str(cfg.path(cfg.job.output))
    lines = summary_lines(result, where, wall_s, failures_by_server(events, started_at), uploads)
    print("\n".join(lines))
