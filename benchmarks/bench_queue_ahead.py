"""Slot time restored (issue 39 item 9): a queue ahead at each server against none, and the
item's peer, in one run.

The item's setup: 3 simulated servers x 32 slots (`max-running-requests = 32`, 60 tok/s a
stream, time scale 10), started by the client under test (server start included), 1,500
prompts made from the MT-bench and Vicuna-bench questions (seed_scale_job.py), thinking on,
max tokens 4,096. Each round runs, its order turned round by round:
- the daemon at `dispatch.queue_ahead = 0` (the default: in flight = what each server runs);
- the daemon at `--ahead` (4);
- the peer (`--peer`, peer_client.py): a bare client on the same config that keeps 96
  streams open per server (32 running + 64 queued in SGLang) and does nothing else.

Per run:
- end to end: the client's spawn to the last answer (the daemon's DB finished_at, the
  peer's own clock; both the wall clock);
- first request to last answer; the tail: the last request sent to the last answer (the
  peer's is long: its queue of 64 drains after its last send);
- ideal: the job's completion tokens over every slot decoding at once (3 x 32 x 600 tok/s),
  what a client that never leaves a slot idle would take from the first request;
- slots busy: the simulators' own running count (/sim/state), polled every 0.2 s from the
  first request until the last prompt was sent, over 96;
- decode pace: the tokens the simulators decoded (their meters) over the running
  slot-seconds in that window, against 600 tok/s: below 1 where the machine's CPU, not the
  simulated GPU, paces the streams;
- the daemon's turnaround per freed slot: with slots S on a server, its i-th request sent
  after its (i - S)-th answer recorded (both from the DB): median of the gap. With a queue
  ahead it is negative (the next request was already waiting in SGLang's queue);
- CPU: the client's own (user + system) and the three simulators'.
The figures that count are the medians' ratios to the daemon at queue_ahead = 0 measured in
the same run, on this shared machine. Run: `DFLASH_REAL_PROMPT_SETS=/work/shared/data python
benchmarks/bench_queue_ahead.py [--rounds 3] [--ahead 4] [--peer 96] [--prompts 1500]
[--stream-interval N]` (about 4 minutes a round here).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from harness import Daemon, config_dict, read_db, spawn, toml_text, wait_exit  # noqa: E402
from seed_scale_job import turns, write_prompts  # noqa: E402

SERVERS, SLOTS, TOK_S, SCALE = 3, 32, 60, 10.0
MAX_TOKENS = 4096


@dataclass
class Run:
    label: str
    spawned: float = 0.0            # the variant's process started (wall clock)
    e2e_s: float = 0.0
    first_to_last_s: float = 0.0
    ideal_s: float = 0.0
    busy: float = 0.0               # mean running / all slots, before the tail
    turnaround_ms: float = 0.0      # the daemon's, median over freed slots
    tail_s: float = 0.0             # the last prompt sent to the last answer
    pace: float = 0.0               # tokens decoded a running slot-second / the nominal rate
    client_cpu_s: float = 0.0       # the daemon's (or peer's) CPU time, user + system
    sims_cpu_s: float = 0.0         # the three simulators' together
    samples: list[tuple[float, int, float]] = field(default_factory=list)


def _config(directory: Path, prompts: int, ahead: int,
            stream_interval: int | None = None) -> dict[str, Any]:
    data = config_dict(directory, servers=SERVERS, prompts=1)
    write_prompts(directory / "prompts.jsonl", prompts, turns())
    data["generation"].update(max_tokens=MAX_TOKENS, enable_thinking=True)
    data["job"]["shard_size"] = 500
    data["servers"]["flags"] = {"max-running-requests": SLOTS, "sim-tokens-per-s": TOK_S,
                                "sim-time-scale": SCALE, "sim-startup-s": 1.0,
                                "context-length": 8192, "reasoning-parser": "qwen3",
                                # Streams paced as on a GPU, not by this machine's CPU
                                # (benchmarks/README.md says what the default pacing cost).
                                "sim-stream-on-schedule": True}
    if stream_interval is not None:
        data["servers"]["flags"]["stream-interval"] = stream_interval
    data["dispatch"] = {"queue_ahead": ahead}
    # The simulator's filler text is not a model's: the quality gate must not stop it.
    data["quality"].update(max_truncation_rate=1.0, max_thinking_truncated_rate=1.0)
    return data


def _poll_running(ports: list[int], out: list[tuple[float, int, float]],
                  stop: threading.Event, cpu: dict[int, float]) -> None:
    """Every 0.2 s: the simulators' running count and decoded tokens, summed; and each one's
    CPU time so far (`cpu`, by port: the daemon stops them when its job ends, so the last
    reading before that is kept)."""
    pids: dict[int, list[str]] = {}
    with httpx.Client(trust_env=False, timeout=2.0) as client:
        while not stop.wait(0.2):
            running, generated = 0, 0.0
            for port in ports:
                try:
                    state = client.get(f"http://127.0.0.1:{port}/sim/state").json()
                    running += state["running"]
                    generated += state["decoded_tokens"]
                except (httpx.HTTPError, ValueError, KeyError):
                    break            # not up yet, or gone: no sample
                if port not in pids:
                    pids[port] = subprocess.run(
                        ["pgrep", "-f", f"supervisor.sim .*--port {port}( |$)"],
                        capture_output=True, text=True).stdout.split()
                cpu[port] = sum(_cpu_s(pid) for pid in pids[port]) or cpu.get(port, 0.0)
            else:
                out.append((time.time(), running, generated))


def _cpu_s(pid: str) -> float:
    """A process's CPU time so far (user + system), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pace(samples: list[tuple[float, int, float]]) -> float:
    """The simulators' decode speed against their nominal one over the samples: tokens
    generated over the running slot-seconds (trapezoids between polls). Below 1 where the
    machine's CPU, not the simulated GPU, paces the streams."""
    slot_s = sum((t2 - t1) * (r1 + r2) / 2 for (t1, r1, _), (t2, r2, _) in zip(samples, samples[1:]))
    tokens = samples[-1][2] - samples[0][2] if samples else 0.0
    return tokens / slot_s / (TOK_S * SCALE) if slot_s > 0 else float("nan")


def _measured(run: Run, ports: list[int], timeout_s: float,
              start: Callable[[], Callable[[], None]]) -> None:
    """`start()` launches the variant and returns what waits for its end; meanwhile the
    simulators are polled, and the CPU of the variant's process and of its servers taken."""
    stop = threading.Event()
    cpu: dict[int, float] = {}
    poller = threading.Thread(target=_poll_running, args=(ports, run.samples, stop, cpu))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run.spawned = time.time()
    wait = start()
    poller.start()
    try:
        wait()
    finally:
        stop.set()
        poller.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The variant's own and the servers' it reaped: the servers' taken out.
    run.sims_cpu_s = sum(cpu.values())
    run.client_cpu_s = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                        - run.sims_cpu_s)


def _figures(run: Run, first: float, last: float, last_sent: float, tokens: int) -> None:
    run.e2e_s, run.first_to_last_s = last - run.spawned, last - first
    run.ideal_s = tokens / (SERVERS * SLOTS * TOK_S * SCALE)
    steady = [s for s in run.samples if first + 2.0 <= s[0] <= last_sent]
    run.busy = statistics.mean(r for _, r, _ in steady) / (SERVERS * SLOTS) if steady \
        else float("nan")
    run.pace = _pace(steady)
    run.tail_s = last - last_sent


def run_daemon(base: Path, n: int, prompts: int, ahead: int, timeout_s: float,
               stream_interval: int | None = None) -> Run:
    directory = base / f"run{n}-ahead{ahead}"
    data = _config(directory, prompts, ahead, stream_interval)
    ports = [data["servers"]["base_port"] + i for i in range(SERVERS)]
    run = Run(f"daemon, queue_ahead {ahead}")
    d: Daemon | None = None

    def start() -> Callable[[], None]:
        nonlocal d
        d = Daemon(spawn(directory, data), directory, data["control"]["socket"])
        return lambda: wait_exit(d, timeout_s, run.label)

    try:
        _measured(run, ports, timeout_s, start)
    finally:
        if d is not None:
            d.stop()
    assert d is not None
    db = directory / "job.db"
    done, first, last, tokens, last_sent = read_db(
        db, "SELECT count(*), min(started_at), max(finished_at), sum(completion_tokens), "
            "max(started_at) FROM prompts WHERE status = 'done'")[0]
    if done != prompts:
        raise SystemExit(f"{run.label}: {done} of {prompts} done: {d.log()[-2000:]}")
    dupes = read_db(db, "SELECT count(*) FROM prompts WHERE attempts > 1")[0][0]
    if dupes:
        print(f"  note: {dupes} prompts took more than one attempt", flush=True)
    _figures(run, first, last, last_sent, tokens)
    run.turnaround_ms = _turnaround(db) * 1000
    return run


def run_peer(base: Path, n: int, prompts: int, in_flight: int, timeout_s: float,
             stream_interval: int | None = None) -> Run:
    """The item's peer (peer_client.py) on the same config: its own servers, `in_flight`
    streams open per server."""
    directory = base / f"run{n}-peer{in_flight}"
    data = _config(directory, prompts, 0, stream_interval)
    (directory / "job.toml").write_text(toml_text(data))
    ports = [data["servers"]["base_port"] + i for i in range(SERVERS)]
    run = Run(f"peer, {in_flight} in flight a server")
    result: dict[str, Any] = {}

    def start() -> Callable[[], None]:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "benchmarks" / "peer_client.py"), "--config",
             str(directory / "job.toml"), "--out", str(directory / "answers.jsonl"),
             "--in-flight", str(in_flight)], stdout=subprocess.PIPE, text=True)

        def wait() -> None:
            out, _ = proc.communicate(timeout=timeout_s)
            if proc.returncode != 0:
                raise SystemExit(f"{run.label}: exited {proc.returncode}: {out[-2000:]}")
            result.update(json.loads(out.strip().splitlines()[-1]))
        return wait

    _measured(run, ports, timeout_s, start)
    if result["answers"] != prompts:
        raise SystemExit(f"{run.label}: {result['answers']} of {prompts} answered")
    _figures(run, result["first_sent"], result["last_answer"], result["last_sent"],
             result["completion_tokens"])
    run.turnaround_ms = float("nan")
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


def report(runs: list[Run]) -> str:
    labels = list(dict.fromkeys(r.label for r in runs))
    base = labels[0]

    def med(label: str, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs if r.label == label)

    lines = ["| run | end to end (s) | first request to last answer (s) | tail (s) | ideal (s) "
             "| slots busy | decode pace | turnaround (ms) | client CPU (s) | e2e ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for label in labels:
        lines.append(f"| {label} | {med(label, 'e2e_s'):.1f} | {med(label, 'first_to_last_s'):.1f}"
                     f" | {med(label, 'tail_s'):.1f} | {med(label, 'ideal_s'):.1f} | "
                     f"{med(label, 'busy'):.3f} | {med(label, 'pace'):.3f} | "
                     f"{med(label, 'turnaround_ms'):.1f} | {med(label, 'client_cpu_s'):.1f} | "
                     f"{med(label, 'e2e_s') / med(base, 'e2e_s'):.3f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=1500)
    ap.add_argument("--ahead", type=int, default=4,
                    help="the queue ahead compared with none (default: 4)")
    ap.add_argument("--peer", type=int, default=96, metavar="N",
                    help="also the item's peer, N requests in flight a server (0: not run)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="a run's limit")
    ap.add_argument("--stream-interval", type=int, default=None,
                    help="the servers' --stream-interval (default: the daemon's, 16): "
                         "larger, fewer chunks for the daemon and the servers to handle, "
                         "where the machine's CPU would otherwise pace the job")
    args = ap.parse_args()
    if args.rounds < 1 or args.ahead < 1 or args.prompts < 1 or args.peer < 0:
        raise SystemExit("need --rounds >= 1, --ahead >= 1, --prompts >= 1 and --peer >= 0")
    variants: list[Callable[[Path, int], Run]] = [
        lambda tmp, n: run_daemon(tmp, n, args.prompts, 0, args.timeout_s,
                                  args.stream_interval),
        lambda tmp, n: run_daemon(tmp, n, args.prompts, args.ahead, args.timeout_s,
                                  args.stream_interval)]
    if args.peer:
        variants.append(lambda tmp, n: run_peer(tmp, n, args.prompts, args.peer,
                                                args.timeout_s, args.stream_interval))
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="bench-queue-ahead-") as tmp:
        for n in range(args.rounds):
            # Alternated, each round's order turned, so a drift in the machine's load falls
            # on every variant.
            shift = n % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                r = variant(Path(tmp), n)
                runs.append(r)
                print(f"round {n + 1}, {r.label}: end to end {r.e2e_s:.1f} s, first request "
                      f"to last answer {r.first_to_last_s:.1f} s, tail {r.tail_s:.1f} s, "
                      f"ideal {r.ideal_s:.1f} s, slots busy {r.busy:.3f}, decode pace "
                      f"{r.pace:.3f}, turnaround {r.turnaround_ms:.1f} ms, CPU: client "
                      f"{r.client_cpu_s:.1f} s, simulators {r.sims_cpu_s:.1f} s", flush=True)
    print(report(sorted(runs, key=lambda r: (r.label.startswith("peer"), r.label))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
