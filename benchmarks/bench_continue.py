"""Raising max tokens mid-job: re-run the truncated answers from scratch, or continue each
from its exact tokens (issue 38). The seed's scenario on simulated servers: 3,000 prompts
(the simulator's lengths: ~18% longer than 4,096 tokens, ~3% longer than 8,192), thinking
on, max tokens 4,096 raised to 8,192 once 30% of the prompts are done, with
`--requeue-truncated` (every truncated answer decoded again from its first token) or
`--continue-truncated` (decoded only past 4,096). Dispatch is paused at the raise until
what is in flight has ended, so both modes redo every answer truncated at 4,096. Only
answers cut off before the raise are redone, in either mode (those sent after it run at
8,192 from their first token), so the saving grows with how late the raise comes: the
seed's came once the job was done (`--raise-at 0.95` is close to it).

Measured per run: the tokens the servers decoded (the simulator's own counter,
/sim/state generation_tokens_total, summed over the servers once the job is over: the
daemon attaches to servers this script starts, so they outlive the job), the wall time
from the daemon's start to the job's end, and the state DB's token ids at the raise (the
`answer_tokens` rows: prompt + output ids, 4 bytes a token) extrapolated to a 900K-prompt
job from the measured bytes per stored answer. Medians over rounds, both modes in each
round.

The simulated servers decode at a fixed pace per stream that slows as the batch grows
(`--sim-batch-knee`), so the wall time follows the decoded tokens as a GPU's does; the
daemon's own CPU on this shared machine adds noise to it, not to the token counts.
Run: `python benchmarks/bench_continue.py [--prompts 3000] [--rounds 3]`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import Daemon, config_dict, read_db, spawn  # noqa: E402
from supervisor.demo.free_ports import free_port  # noqa: E402
from supervisor.sim.launch import kill_group, sim_argv, wait_healthy  # noqa: E402

OLD, NEW = 4096, 8192
RAISE_AT = 0.30                # the scenario; the seed's own raise came at the end
SEED_PROMPTS = 900_000
SIM = ("--context-length", "16384", "--max-running-requests", "64",
       "--reasoning-parser", "qwen3", "--stream-interval", "256",
       "--sim-tokens-per-s", "100", "--sim-batch-knee", "32", "--sim-startup-s", "0")


@dataclass
class Run:
    mode: str
    decoded: int = 0               # tokens the servers decoded, the whole job
    wall_s: float = 0.0
    truncated_at_raise: int = 0
    done_at_raise: int = 0
    stored_rows: int = 0           # answer_tokens rows at the raise
    stored_bytes: int = 0          # their ids' bytes


def _servers(directory: Path, count: int, scale: float) -> list[tuple[subprocess.Popen, int]]:
    out = []
    for i in range(count):
        port = free_port()
        log = open(directory / f"sim-{i}.log", "wb")
        proc = subprocess.Popen(sim_argv(port, *SIM, "--sim-time-scale", str(scale)),
                                stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        out.append((proc, port))
    for proc, port in out:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
    return out


def _decoded(ports: list[int]) -> int:
    with httpx.Client(trust_env=False, timeout=10) as client:
        return sum(client.get(f"http://127.0.0.1:{p}/sim/state").json()
                   ["generation_tokens_total"] for p in ports)


def run_once(base: Path, mode: str, prompts: int, servers: int, scale: float,
             timeout_s: float, raise_at: float) -> Run:
    directory = base / mode
    directory.mkdir(parents=True)
    sims = _servers(directory, servers, scale)
    ports = [p for _, p in sims]
    run = Run(mode)
    try:
        data: dict[str, Any] = config_dict(directory, servers=1, prompts=prompts)
        data["servers"] = {"count": 0, "attach": [f"http://127.0.0.1:{p}" for p in ports],
                           "health_interval_s": 0.5,
                           # What the attached servers run with, for the daemon's checks.
                           "flags": {"reasoning-parser": "qwen3", "context-length": 16384}}
        data["generation"].update(max_tokens=OLD, enable_thinking=True)
        data["job"]["shard_size"] = 500
        # The simulator's filler text is not a model's: the quality gate must not stop it.
        data["quality"].update(max_truncation_rate=1.0, max_thinking_truncated_rate=1.0)
        warmup = _decoded(ports)                 # the servers' own warmup requests
        d = Daemon(spawn(directory, data), directory, data["control"]["socket"])
        db = directory / "job.db"
        try:
            run = _drive(d, db, run, prompts, timeout_s, raise_at)
        finally:
            if d.stop() not in (0, None):
                raise SystemExit(f"{mode}: the daemon failed: {d.log()[-3000:]}")
        run.decoded = _decoded(ports) - warmup
    finally:
        for proc, _ in sims:
            kill_group(proc)
    return run


def _done(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        return read_db(db, "SELECT count(*) FROM prompts WHERE status = 'done'")[0][0]
    except Exception:             # the schema is still being made
        return 0


def _drive(d: Daemon, db: Path, run: Run, prompts: int, timeout_s: float,
           raise_at: float) -> Run:
    deadline = time.monotonic() + timeout_s
    started = None
    raised = False
    while d.proc.poll() is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"{run.mode}: not done in {timeout_s:g} s: {d.log()[-2000:]}")
        done = _done(db)
        if started is None and db.exists():
            started = time.monotonic()
        if not raised and done >= raise_at * prompts:
            # As the seed's operator did: stop sending, let what is in flight end at the
            # old limit, then raise, so both modes redo every answer truncated at 4,096
            # (today's requeue misses those still in flight at the raise).
            with d.client() as client:
                client.pause("bench: raise max tokens")
                while client.status().job.in_flight and time.monotonic() < deadline:
                    time.sleep(0.2)
            done = _done(db)
            run.done_at_raise = done
            run.truncated_at_raise = read_db(
                db, "SELECT count(*) FROM prompts WHERE status = 'done' AND "
                    "finish_reason = 'length'")[0][0]
            run.stored_rows, run.stored_bytes = read_db(
                db, "SELECT count(*), coalesce(sum(length(prompt_ids) + length(output_ids)), 0)"
                    " FROM answer_tokens")[0]
            with d.client() as client:
                client.set_max_tokens(NEW, requeue_truncated=run.mode == "requeue",
                                      continue_truncated=run.mode == "continue")
                client.resume()
            raised = True
        time.sleep(0.2)
    run.wall_s = time.monotonic() - (started or time.monotonic())
    if not raised or _done(db) != prompts:
        raise SystemExit(f"{run.mode}: the job ended with {_done(db)} of {prompts} done "
                         f"(raised: {raised}): {d.log()[-2000:]}")
    left = read_db(db, "SELECT count(*) FROM prompts WHERE finish_reason = 'length' AND "
                       f"max_tokens < {NEW}")[0][0]
    if left:
        raise SystemExit(f"{run.mode}: {left} answers left truncated under {NEW:,}")
    return run


def _median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs)


def report(by_mode: dict[str, list[Run]], prompts: int, raise_at: float) -> str:
    req, cont = by_mode["requeue"], by_mode["continue"]
    lines = [f"{prompts:,} prompts, max tokens {OLD:,} -> {NEW:,} at {raise_at:.0%} done, "
             f"{len(req)} round(s), medians:",
             "| mode | decoded tokens | wall time | truncated at the raise |",
             "|---|---|---|---|"]
    for name, runs in by_mode.items():
        lines.append(f"| {name} | {_median(runs, 'decoded'):,.0f} | "
                     f"{_median(runs, 'wall_s'):.1f} s | "
                     f"{_median(runs, 'truncated_at_raise'):,.0f} of "
                     f"{_median(runs, 'done_at_raise'):,.0f} |")
    ratio_tokens = _median(cont, "decoded") / _median(req, "decoded")
    ratio_wall = _median(cont, "wall_s") / _median(req, "wall_s")
    lines.append(f"continue / requeue: decoded tokens {ratio_tokens:.3f} "
                 f"({1 - ratio_tokens:.1%} fewer), wall time {ratio_wall:.3f}")
    rows, size = _median(cont, "stored_rows"), _median(cont, "stored_bytes")
    done = _median(cont, "done_at_raise")
    if rows:
        per = size / rows
        at_900k = SEED_PROMPTS * rows / done * per
        lines.append(f"state DB token ids at the raise: {rows:,.0f} stored answers, "
                     f"{per / 1024:.1f} KB each (prompt + output ids, 4 bytes a token; "
                     f"SQLite's page overhead not counted); extrapolated to {SEED_PROMPTS:,} "
                     f"prompts at the same share ({rows / done:.1%}): "
                     f"{at_900k / 1e9:.2f} GB")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--time-scale", type=float, default=20.0,
                    help="the simulator's --sim-time-scale (speed of every stream)")
    ap.add_argument("--timeout-s", type=float, default=1800.0)
    ap.add_argument("--raise-at", type=float, default=RAISE_AT,
                    help="the share of prompts done when max tokens is raised (0.95: about "
                         "the seed's, whose raise came once the job was done)")
    args = ap.parse_args()
    if args.prompts < 100 or args.rounds < 1 or args.servers < 1:
        raise SystemExit("--prompts must be >= 100, --rounds and --servers >= 1")
    if not 0 < args.raise_at < 1:
        raise SystemExit(f"--raise-at must be within (0, 1), got {args.raise_at}")
    by_mode: dict[str, list[Run]] = {"requeue": [], "continue": []}
    with tempfile.TemporaryDirectory(prefix="bench-continue-") as tmp:
        for i in range(args.rounds):
            for mode in by_mode:
                run = run_once(Path(tmp) / f"round{i}", mode, args.prompts, args.servers,
                               args.time_scale, args.timeout_s, args.raise_at)
                by_mode[mode].append(run)
                print(f"round {i} {mode}: decoded {run.decoded:,} tokens in "
                      f"{run.wall_s:.1f} s", flush=True)
    print(report(by_mode, args.prompts, args.raise_at))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
