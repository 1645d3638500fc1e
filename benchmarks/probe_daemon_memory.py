"""Where the daemon's memory goes over a long run: the real daemon (`supervisor run`, in this
process under tracemalloc) on fast simulated servers, a snapshot every `--every` answers, and
the allocation sites that grew most between the snapshot after `--warm` answers and the last.

    python benchmarks/probe_daemon_memory.py [--prompts 60000] [--every 5000] [--warm 10000]

Prints one line per snapshot (answers done, traced MB, anonymous RSS MB) and the sites that
grew most since the snapshot after `--warm` answers (file:line, KB and blocks gained);
`--no-trace` prints anonymous RSS alone, the daemon at full speed. tracemalloc roughly doubles the daemon's CPU;
the figures are for finding what grows, not for timing.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import threading
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from harness import config_dict, toml_text  # noqa: E402


def anon_rss_mb() -> float:
    for raw in Path("/proc/self/status").read_text().splitlines():
        if raw.startswith("RssAnon:"):
            return int(raw.split()[1]) / 1024
    return float("nan")


def done(db: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return int(con.execute("SELECT n FROM status_counts WHERE status='done'").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def watch(db: Path, every: int, warm: int, top: int, stop: threading.Event,
          total: int, trace_from: int | None) -> None:
    snaps: list[tuple[int, tracemalloc.Snapshot]] = []
    mark = every
    while not stop.is_set():
        n = done(db)
        if trace_from is not None and n >= trace_from and not tracemalloc.is_tracing():
            # Traced from here on: what is still alive at the next snapshots was allocated
            # during the long run, at full speed until now.
            tracemalloc.start(1)
            mark = n
        if (n >= mark or n >= total) and not tracemalloc.is_tracing():
            if trace_from is not None and n < trace_from:
                stop.wait(1.0)
                continue
            print(json.dumps({"done": n, "anon_rss_mb": round(anon_rss_mb(), 1)}), flush=True)
            mark = n + every
            if n >= total:
                break
        elif n >= mark or n >= total:
            snap = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__)])
            traced = sum(s.size for s in snap.statistics("filename")) / 1e6
            print(json.dumps({"done": n, "traced_mb": round(traced, 2),
                              "anon_rss_mb": round(anon_rss_mb(), 1)}), flush=True)
            snaps.append((n, snap))
            mark = n + every
            base = next((s for s in snaps if s[0] >= warm), None)
            if base is not None and base is not snaps[-1]:
                print(f"-- growth from {base[0]} to {n} answers --", flush=True)
                for stat in snap.compare_to(base[1], "lineno")[:top]:
                    print(f"{stat.size_diff / 1024:+9.1f} KB {stat.count_diff:+7d} blocks  "
                          f"{stat.traceback[0]}", flush=True)
            if n >= total:
                break
        stop.wait(1.0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=60_000)
    p.add_argument("--every", type=int, default=5_000)
    p.add_argument("--warm", type=int, default=10_000)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--thinking", action="store_true", help="thinking on, as the seed job")
    p.add_argument("--stream-step", type=int, default=16,
                   help="tokens per streamed delta (0: coalesced, the cheapest to serve)")
    p.add_argument("--no-trace", dest="trace", action="store_false",
                   help="anonymous RSS only, at full speed (no tracemalloc)")
    p.add_argument("--trace-from", type=int, default=None,
                   help="full speed until this many answers, traced after (sets --warm)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memprobe-"))
    data = config_dict(work, prompts=args.prompts)
    data["servers"]["flags"] = {"max-running-requests": 32, "sim-instant": True,
                                "sim-stream-step": args.stream_step, "context-length": 8192}
    data["generation"]["max_tokens"] = args.max_tokens
    if args.thinking:           # the seed's shape: a trace, then the answer
        data["generation"]["enable_thinking"] = True
        data["servers"]["flags"]["reasoning-parser"] = "qwen3"
    data["job"]["shard_size"] = 500
    (work / "job.toml").write_text(toml_text(data))
    os.chdir(work)
    if args.trace_from is not None:
        args.warm = args.trace_from
    elif args.trace:
        tracemalloc.start(1)
    stop = threading.Event()
    t = threading.Thread(target=watch, args=(work / "job.db", args.every, args.warm, args.top,
                                              stop, args.prompts, args.trace_from),
                         daemon=True)
    t.start()
    from supervisor.commands.cli import main as cli
    try:
        rc = cli(["run", "--config", str(work / "job.toml")])
    finally:
        stop.set()
        t.join(timeout=120)
    print(f"daemon exit {rc}; work in {work}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
