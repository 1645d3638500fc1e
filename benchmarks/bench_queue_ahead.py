"""Slot time restored (issue 39 item 9): a queue ahead at each server against none.

The item's setup: 3 simulated servers x 32 slots (`max-running-requests = 32`, 60 tok/s a
stream, time scale 10), the daemon starting them (server start included), 1,500 prompts made
from the MT-bench and Vicuna-bench questions (seed_scale_job.py), thinking on, max tokens
4,096. Runs alternate `dispatch.queue_ahead = 0` (the daemon before: in flight = what each
server runs) and the new default (or `--ahead`), `--rounds` of each, medians.

Per run:
- end to end: the daemon's spawn to the last answer recorded (the DB's finished_at; the
  daemon's clock is the wall clock);
- first request to last answer: the earliest request sent to the last answer;
- ideal: the job's completion tokens over every slot decoding at once (3 x 32 x 600 tok/s),
  what a daemon that never leaves a slot idle would take from the first request;
- slots busy: the simulators' own running count (/sim/state), polled every 0.2 s from the
  first request until the last prompt was sent (the tail, when slots empty for want of
  prompts, is the same for both), over 96;
- the daemon's turnaround per freed slot: with slots S on a server, its i-th request sent
  after its (i - S)-th answer recorded (both from the DB): median of the gap. With a queue
  ahead it is negative (the next request was already waiting in SGLang's queue).
The figures that count are the medians' ratios to queue_ahead = 0 measured in the same run,
on this shared machine. Run: `DFLASH_REAL_PROMPT_SETS=/work/shared/data python
benchmarks/bench_queue_ahead.py [--rounds 3] [--ahead 4] [--prompts 1500]
[--stream-interval N]` (about 4 minutes a round here).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from harness import Daemon, config_dict, read_db, spawn, wait_exit  # noqa: E402
from seed_scale_job import turns, write_prompts  # noqa: E402

SERVERS, SLOTS, TOK_S, SCALE = 3, 32, 60, 10.0
MAX_TOKENS = 4096


@dataclass
class Run:
    ahead: int
    e2e_s: float = 0.0
    first_to_last_s: float = 0.0
    ideal_s: float = 0.0
    busy: float = 0.0               # mean running / all slots, before the tail
    turnaround_ms: float = 0.0      # the daemon's, median over freed slots
    samples: list[tuple[float, int]] = field(default_factory=list)


def _config(directory: Path, prompts: int, ahead: int,
            stream_interval: int | None = None) -> dict[str, Any]:
    data = config_dict(directory, servers=SERVERS, prompts=1)
    write_prompts(directory / "prompts.jsonl", prompts, turns())
    data["generation"].update(max_tokens=MAX_TOKENS, enable_thinking=True)
    data["job"]["shard_size"] = 500
    data["servers"]["flags"] = {"max-running-requests": SLOTS, "sim-tokens-per-s": TOK_S,
                                "sim-time-scale": SCALE, "sim-startup-s": 1.0,
                                "context-length": 8192, "reasoning-parser": "qwen3"}
    if stream_interval is not None:
        data["servers"]["flags"]["stream-interval"] = stream_interval
    data["dispatch"] = {"queue_ahead": ahead}
    # The simulator's filler text is not a model's: the quality gate must not stop it.
    data["quality"].update(max_truncation_rate=1.0, max_thinking_truncated_rate=1.0)
    return data


def _poll_running(ports: list[int], out: list[tuple[float, int]], stop: threading.Event) -> None:
    with httpx.Client(trust_env=False, timeout=2.0) as client:
        while not stop.wait(0.2):
            total = 0
            for port in ports:
                try:
                    total += client.get(f"http://127.0.0.1:{port}/sim/state").json()["running"]
                except (httpx.HTTPError, ValueError, KeyError):
                    break            # not up yet, or gone: no sample
            else:
                out.append((time.time(), total))


def run_once(base: Path, n: int, prompts: int, ahead: int, timeout_s: float,
             stream_interval: int | None = None) -> Run:
    directory = base / f"run{n}-ahead{ahead}"
    data = _config(directory, prompts, ahead, stream_interval)
    ports = [data["servers"]["base_port"] + i for i in range(SERVERS)]
    run = Run(ahead)
    stop = threading.Event()
    poller = threading.Thread(target=_poll_running, args=(ports, run.samples, stop))
    spawned = time.time()
    d = Daemon(spawn(directory, data), directory, data["control"]["socket"])
    poller.start()
    try:
        wait_exit(d, timeout_s, f"ahead {ahead}")
    finally:
        stop.set()
        poller.join()
        d.stop()
    db = directory / "job.db"
    done, first, last, tokens = read_db(
        db, "SELECT count(*), min(started_at), max(finished_at), sum(completion_tokens) "
            "FROM prompts WHERE status = 'done'")[0]
    if done != prompts:
        raise SystemExit(f"ahead {ahead}: {done} of {prompts} done: {d.log()[-2000:]}")
    dupes = read_db(db, "SELECT count(*) FROM prompts WHERE attempts > 1")[0][0]
    if dupes:
        print(f"  note: {dupes} prompts took more than one attempt", flush=True)
    run.e2e_s, run.first_to_last_s = last - spawned, last - first
    run.ideal_s = tokens / (SERVERS * SLOTS * TOK_S * SCALE)
    last_sent = read_db(db, "SELECT max(started_at) FROM prompts")[0][0]
    steady = [r for t, r in run.samples if first + 2.0 <= t <= last_sent]
    run.busy = statistics.mean(steady) / (SERVERS * SLOTS) if steady else float("nan")
    run.turnaround_ms = _turnaround(db) * 1000
    return run


def _turnaround(db: Path) -> float:
    gaps: list[float] = []
    for (server,) in read_db(db, "SELECT DISTINCT server FROM prompts WHERE status = 'done'"):
        rows = read_db(db, "SELECT started_at, finished_at FROM prompts WHERE server = ? "
                           "AND status = 'done'", server)
        sent = sorted(r[0] for r in rows)
        ended = sorted(r[1] for r in rows)
        gaps += [sent[i] - ended[i - SLOTS] for i in range(SLOTS, len(sent))]
    return statistics.median(gaps) if gaps else float("nan")


def report(runs: list[Run], ahead: int) -> str:
    def med(k: int, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs if r.ahead == k)

    lines = ["| queue_ahead | end to end (s) | first request to last answer (s) | ideal (s) "
             "| slots busy | turnaround (ms) |", "|---|---|---|---|---|---|"]
    for k in (0, ahead):
        lines.append(f"| {k} | {med(k, 'e2e_s'):.1f} | {med(k, 'first_to_last_s'):.1f} | "
                     f"{med(k, 'ideal_s'):.1f} | {med(k, 'busy'):.3f} | "
                     f"{med(k, 'turnaround_ms'):.1f} |")
    lines.append(f"ratio to queue_ahead 0: end to end {med(ahead, 'e2e_s') / med(0, 'e2e_s'):.3f}"
                 f", first request to last answer "
                 f"{med(ahead, 'first_to_last_s') / med(0, 'first_to_last_s'):.3f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=1500)
    ap.add_argument("--ahead", type=int, default=4,
                    help="the queue ahead compared with none (default: the config's default)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="a run's limit")
    ap.add_argument("--stream-interval", type=int, default=None,
                    help="the servers' --stream-interval (default: the simulator's, 16): "
                         "larger, fewer chunks for the daemon and the servers to handle, "
                         "where the machine's CPU would otherwise pace the job")
    args = ap.parse_args()
    if args.rounds < 1 or args.ahead < 1 or args.prompts < 1:
        raise SystemExit("need --rounds >= 1, --ahead >= 1 and --prompts >= 1")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="bench-queue-ahead-") as tmp:
        for n in range(args.rounds):
            # Alternated, each round's order flipped, so a drift in the machine's load falls
            # on both.
            for k in ((0, args.ahead) if n % 2 == 0 else (args.ahead, 0)):
                r = run_once(Path(tmp), n, args.prompts, k, args.timeout_s,
                             args.stream_interval)
                runs.append(r)
                print(f"round {n + 1} ahead {k}: end to end {r.e2e_s:.1f} s, first request "
                      f"to last answer {r.first_to_last_s:.1f} s, ideal {r.ideal_s:.1f} s, "
                      f"slots busy {r.busy:.3f}, turnaround {r.turnaround_ms:.1f} ms",
                      flush=True)
    print(report(runs, args.ahead))
    return 0


if __name__ == "__main__":
    sys.exit(main())
