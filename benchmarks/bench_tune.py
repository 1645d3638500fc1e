"""The tuner's worth on a whole job (issue 39 item 8): a simulated 3-server job started at the
seed's capped flags, run to its end with the tuner on and off, against the same job started
at the best flags.

The seed's case, in the simulator's flag model (supervisor/sim/README.md, "Flag response"):
a hybrid model whose Mamba cache (`--sim-mamba-slots 80`, 5 slots a request) caps the running
requests at 16 although `--max-running-requests 64` is asked, and a batch speed that peaks at
exactly 64 running requests (`--sim-batch-peak 64`: 16 running give 0.47 of the top). The best
flags are `--max-mamba-cache-size 320` (64 requests' state) with `--max-running-requests 64`.

Three jobs, each from an empty state DB, the daemon (`dflash-supervisor run`) starting its
servers, each run in turn per round, `--rounds` rounds, medians:
- capped: the seed's flags, no tuner;
- tuned: the seed's flags, `[tune] enabled = true` with the built-in space (the tuner reads
  the Mamba cap from the server's log and steps the cache first, as docs/tuning.md says);
- best: started at the best flags, no tuner (the ceiling).
Per run: end to end (spawn to the last answer recorded), the trials spent and their verdicts
(the state DB's tune_trials), and the flags the tuner left on each server (tune_flags).
The figures that count are ratios of medians measured in the same run, on this shared
machine. Run: `python benchmarks/bench_tune.py [--rounds 2] [--prompts 6000]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from harness import Daemon, config_dict, read_db, spawn, wait_exit  # noqa: E402

SERVERS = 3
SEED_FLAGS: dict[str, Any] = {
    "max-running-requests": 64, "sim-mamba-slots": 80, "sim-mamba-slots-per-req": 5,
    "sim-batch-peak": 64, "sim-tokens-per-s": 50, "sim-time-scale": 4.0,
    "sim-startup-s": 4.0, "sim-stream-step": 64, "context-length": 4096}
BEST = {"max-mamba-cache-size": 320}
# Windows of seconds, not a real job's minutes: the job here lasts minutes in all. The
# first step (the cache that lifts the cap) is a +110% gain, far outside their noise.
TUNE = {"enabled": True, "max_trials": 4, "min_window_s": 6.0, "max_window_s": 15.0,
        "min_answers": 30, "warmup_s": 1.0, "warmup_answers": 5, "sample_s": 0.5,
        "noise_k": 3.0}
MODES = ("capped", "tuned", "best")


@dataclass
class Run:
    mode: str
    e2e_s: float = 0.0
    trials: list[tuple[str, str]] = field(default_factory=list)   # (changed, verdict)
    kept: dict[str, Any] = field(default_factory=dict)            # server -> flags


def _config(directory: Path, prompts: int, mode: str) -> dict[str, Any]:
    data = config_dict(directory, servers=SERVERS, prompts=prompts)
    data["servers"]["flags"] = {**SEED_FLAGS, **(BEST if mode == "best" else {})}
    data["job"]["shard_size"] = 500
    data["quality"].update(max_truncation_rate=1.0, max_thinking_truncated_rate=1.0)
    if mode == "tuned":
        data["tune"] = dict(TUNE)
    return data


def run_once(base: Path, n: int, prompts: int, mode: str, timeout_s: float) -> Run:
    directory = base / f"run{n}-{mode}"
    data = _config(directory, prompts, mode)
    run = Run(mode)
    spawned = time.time()
    d = Daemon(spawn(directory, data), directory, data["control"]["socket"])
    try:
        wait_exit(d, timeout_s, mode)
    finally:
        d.stop()
    db = directory / "job.db"
    done, last = read_db(db, "SELECT count(*), max(finished_at) FROM prompts "
                             "WHERE status = 'done'")[0]
    if done != prompts:
        raise SystemExit(f"{mode}: {done} of {prompts} done: {d.log()[-2000:]}")
    run.e2e_s = last - spawned
    if mode == "tuned":
        run.trials = read_db(db, "SELECT changed, verdict FROM tune_trials ORDER BY id")
        run.kept = {s: json.loads(f) for s, f in
                    read_db(db, "SELECT server, flags FROM tune_flags ORDER BY server")}
    return run


def _gained(flags: dict[str, Any]) -> str:
    keys = ("max-mamba-cache-size", "max-running-requests", "mem-fraction-static")
    return ", ".join(f"{k}={flags[k]}" for k in keys if k in flags) or "the start"


def report(runs: list[Run]) -> str:
    def med(mode: str) -> float:
        return statistics.median(r.e2e_s for r in runs if r.mode == mode)

    tuned = [r for r in runs if r.mode == "tuned"]
    lines = ["| job | end to end (s, median) | vs capped | vs best |", "|---|---|---|---|"]
    for mode in MODES:
        lines.append(f"| {mode} | {med(mode):.1f} | {med(mode) / med('capped'):.3f} | "
                     f"{med(mode) / med('best'):.3f} |")
    trials = statistics.median(len(r.trials) for r in tuned)
    lines.append(f"tuned: trials spent (median) {trials:g}; time saved against capped "
                 f"{med('capped') - med('tuned'):.1f} s, of the {med('capped') - med('best'):.1f} "
                 f"s the best flags save")
    for r in tuned:
        lines.append("  trials: " + "; ".join(f"{c}: {v}" for c, v in r.trials)
                     + " | in force: " + "; ".join(f"{s} {_gained(f)}" for s, f in r.kept.items()))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=6000)
    ap.add_argument("--timeout-s", type=float, default=600.0, help="a run's limit")
    args = ap.parse_args()
    if args.rounds < 1 or args.prompts < 1:
        raise SystemExit("need --rounds >= 1 and --prompts >= 1")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        for n in range(args.rounds):
            # Each round's order reversed from the last, so a drift in the machine's load
            # falls on every mode.
            for mode in (MODES if n % 2 == 0 else tuple(reversed(MODES))):
                r = run_once(Path(tmp), n, args.prompts, mode, args.timeout_s)
                runs.append(r)
                print(f"round {n + 1} {mode}: end to end {r.e2e_s:.1f} s"
                      + (f", {len(r.trials)} trials" if mode == "tuned" else ""), flush=True)
    print(report(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
