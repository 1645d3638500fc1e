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
import random
import socket
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from supervisor.config import ConfigError, JobConfig, parse_config

log = logging.getLogger("supervisor.demo")

# Simulated timing: a day's shape in about a minute. Each slot decodes at
# tokens_per_s × time_scale tokens per wall second; with 3 servers × 32 slots and ~2,000
# output tokens on average, 3,000 prompts take about a minute.
DEMO_TOKENS_PER_S = 60
DEMO_TIME_SCALE = 20.0
DEMO_SLOTS = 32
# A demo's S3 settings: its ~6 MB shards cross S3's smallest multipart size, so both kinds of
# upload show; short timeouts and backoff so a stopped store is noticed, and recovered from,
# within the demo's minute.
DEMO_S3: dict[str, Any] = {"multipart_threshold_bytes": 5 * 1024 * 1024,
                           "multipart_part_bytes": 5 * 1024 * 1024, "timeout_s": 10.0,
                           "retry_initial_s": 0.5, "retry_max_s": 4.0, "drain_timeout_s": 120.0}


def free_base_port(count: int, start: int = 31000, stop: int = 60000) -> int:
    """`count` consecutive free loopback ports. A new range per run is fine: the servers of
    a killed run are stopped by their recorded process groups, not found by port."""
    base = start + random.randrange(1000) * 10
    for _ in range(200):
        if base + count >= stop:
            base = start
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            base += count + 7
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free block of loopback ports found")


def demo_config(directory: Path, *, servers: int, prompts_file: Path, output: str,
                max_tokens: int, sim_flags: dict[str, Any], endpoint_url: str | None,
                base_port: int) -> JobConfig:
    data: dict[str, Any] = {
        "job": {"prompts": str(prompts_file), "state": "job.db", "output": output,
                "shard_size": 500, "model": "demo-sim"},
        "generation": {"max_tokens": max_tokens},
        "servers": {
            "count": servers, "base_port": base_port, "model_path": "sim/demo-model",
            "command": [sys.executable, "-m", "supervisor.sim"],
            "log_dir": "logs", "startup_timeout_s": 60.0, "health_interval_s": 1.0,
            "health_timeout_s": 2.0, "hang_timeout_s": 20.0, "stop_grace_s": 5.0,
            "drain_timeout_s": 30.0, "backoff_initial_s": 0.5, "backoff_max_s": 10.0,
            "failure_window_s": 120.0,
            "flags": {"max-running-requests": DEMO_SLOTS, "context-length": 32768,
                      "reasoning-parser": "qwen3", "enable-metrics": True, **sim_flags},
        },
        "quality": {"window": 200, "min_samples": 50, "max_bad_rate": 0.5,
                    "metrics_window_s": 15.0},
        "uploads": {"spool_dir": "spool", "min_free_bytes": 64 * 1024 * 1024,
                    **({"endpoint_url": endpoint_url} if endpoint_url else {}),
                    **(DEMO_S3 if output.startswith("s3://") else {})},
        "control": {"socket": str(directory / "control.sock")},
    }
    return parse_config(data, base_dir=directory)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config_file(path: Path, cfg: JobConfig) -> None:
    """The demo's config as TOML, so `dflash-supervisor run --config` can run it too."""
    s = cfg.servers
    lines = ["# Written by `dflash-supervisor demo`; runs with `dflash-supervisor run --config`.",
             "[job]", f"prompts = {_toml_value(cfg.job.prompts)}",
             f"state = {_toml_value(cfg.job.state)}", f"output = {_toml_value(cfg.job.output)}",
             f"shard_size = {cfg.job.shard_size}", f"model = {_toml_value(cfg.job.model)}", "",
             "[generation]", f"max_tokens = {cfg.generation.max_tokens}", "", "[servers]",
             f"count = {s.count}", f"base_port = {s.base_port}",
             f"model_path = {_toml_value(s.model_path)}", f"command = {_toml_value(s.command)}",
             f"startup_timeout_s = {s.startup_timeout_s}", f"hang_timeout_s = {s.hang_timeout_s}",
             f"backoff_initial_s = {s.backoff_initial_s}", f"backoff_max_s = {s.backoff_max_s}",
             "", "[servers.flags]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in s.flags.items()]
    u = cfg.uploads
    lines += ["", "[uploads]", f"spool_dir = {_toml_value(u.spool_dir)}",
              f"min_free_bytes = {u.min_free_bytes}"]
    if u.endpoint_url:
        lines.append(f"endpoint_url = {_toml_value(u.endpoint_url)}")
    if cfg.output_is_s3:
        lines += [f"{k} = {_toml_value(getattr(u, k))}" for k in DEMO_S3]
    path.write_text("\n".join(lines) + "\n")


class _ProgressPrinter:
    def __init__(self, stream: Any, interval_s: float) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.interval_s = interval_s
        self._last = 0.0
        self._width = 0

    def __call__(self, status: Any) -> None:
        from supervisor.job_status import progress_line

        line = progress_line(status)
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
            self.stream.flush()
        elif time.monotonic() - self._last >= self.interval_s or status.finished:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last = time.monotonic()

    def end(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dflash-supervisor demo",
                                description="Run a whole job on simulated SGLang servers.")
    p.add_argument("--prompts", type=int, default=3000, help="synthetic prompts (default 3000)")
    p.add_argument("--servers", type=int, default=3, help="simulated servers (default 3)")
    p.add_argument("--dir", default="demo-output", help="job directory (default ./demo-output)")
    p.add_argument("--output", default=None,
                   help="where shards go: a directory (default DIR/shards) or s3://bucket/prefix/")
    p.add_argument("--endpoint-url", default=None, help="S3-compatible endpoint for s3:// output")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--time-scale", type=float, default=DEMO_TIME_SCALE,
                   help="simulated seconds per wall second")
    p.add_argument("--instant", action="store_true", help="servers answer at once (benchmarks)")
    p.add_argument("--empty-rate", type=float, default=0.0,
                   help="share of empty completions the servers return (trips the quality gate)")
    p.add_argument("--fault", choices=("none", "crash", "oom", "hang", "stall"), default="none",
                   help="make every server fail this way after --fault-after-s")
    p.add_argument("--fault-after-s", type=float, default=10.0)
    p.add_argument("--quiet", action="store_true", help="no progress line")
    args = p.parse_args(argv)
    if args.prompts < 1 or args.servers < 1:
        p.error("--prompts and --servers must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    import anyio

    from supervisor.demo_prompts import write_demo_prompts
    from supervisor.job import Job, JobError

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
    if args.fault != "none":
        sim_flags["sim-fault"] = args.fault
        sim_flags["sim-fault-after-s"] = args.fault_after_s * args.time_scale
    try:
        cfg = demo_config(directory, servers=args.servers, prompts_file=prompts_file,
                          output=args.output or "shards", max_tokens=args.max_tokens,
                          sim_flags=sim_flags, endpoint_url=args.endpoint_url,
                          base_port=free_base_port(args.servers))
    except ConfigError as exc:
        print(f"dflash-supervisor demo: {exc}", file=sys.stderr)
        return 2
    write_config_file(directory / "demo.toml", cfg)
    out = cfg.job.output if cfg.output_is_s3 else str(cfg.path(cfg.job.output))
    print(f"demo: {args.prompts} prompts, {args.servers} simulated servers, shards -> {out}"
          f"\n      state {cfg.path(cfg.job.state)}, logs {directory / 'logs'}", flush=True)
    printer = None if args.quiet else _ProgressPrinter(sys.stdout, 5.0)
    job = Job(cfg, exit_when_paused=True, on_status=printer)
    started = time.monotonic()
    try:
        result = anyio.run(job.run)
    except JobError as exc:
        print(f"dflash-supervisor demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        if printer is not None:
            printer.end()
    _summary(result, cfg, time.monotonic() - started)
    return 0 if result.finished else 3


def _log_to_file(path: Path) -> None:
    # The terminal gets the progress line and warnings; the full log goes to a file.
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    fh = logging.FileHandler(path)
    fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(fh)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    err.setFormatter(logging.Formatter("\n%(levelname)s %(name)s: %(message)s"))
    root.addHandler(err)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _summary(result: Any, cfg: JobConfig, wall_s: float) -> None:
    s = result.status
    q = s.dispatch.quality
    print(f"demo {result.reason} in {wall_s:.0f} s: {s.done}/{s.total} done, {s.failed} failed, "
          f"{s.remaining} left")
    print(f"      this run: {q.checked_total} completions checked, {q.truncated_total} truncated "
          f"at max_tokens, {q.bad_total} bad")
    restarts = sum(srv.restarts for srv in s.servers)
    if restarts:
        print(f"      servers restarted {restarts} times: " + ", ".join(
            f"{srv.name} {srv.last_exit_reason}" for srv in s.servers if srv.restarts))
    where = cfg.job.output if cfg.output_is_s3 else cfg.path(cfg.job.output)
    u = s.uploads
    if cfg.output_is_s3 and u is not None:
        state = f"STOPPED: {u.stopped}" if u.stopped else (
            f"last error: {u.last_error}" if u.backlog_shards and u.last_error else "ok")
        print(f"      uploads: {u.uploaded_shards} shards verified in {u.destination} "
              f"({u.uploaded_bytes / 1e6:.1f} MB), {u.backlog_shards} waiting; {state}")
    print(f"      shards in {where}; run the same command again to resume (nothing is redone)")
