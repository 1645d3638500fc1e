"""Load benchmark: the daemon (`python -m supervisor run`, the real Job) on the load-faithful
simulator at the seed job's shape, and the same run with one server's scheduler stuck.

The shape (each simulated server, `python -m supervisor.sim`, as SGLang 0.5.23 schedules):
64 running requests per server (`--max-running-requests 64`); a KV pool of
`--max-total-tokens` too small for 64 answers of the simulator's own heavy-tailed lengths
(lognormal, median ~2,100 tokens, ~3% past 8,192, up to 32,768: `supervisor/sim/output_plan.py`),
so the scheduler queues by its admission estimate and retracts the newest under pressure;
each stream decodes at 1 / (1 + (n-1)/32) of 150 tok/s in a batch of n (~50 tok/s at 64).
Thinking on (the qwen3 reasoning parser), streamed, max tokens 8,192 and 32,768.

Time: `--time-scale K` runs the simulator K times faster than the GPU it stands for, and
every daemon timing that a real job's would be compared with (health interval and timeout,
hang_timeout_s, stall_s, wait_s, the guard's calm time, backoff, request timeout) is divided
by K too, so the daemon sees the same shape a real node shows, K times faster: one
simulated second is 1/K of a wall second (K = 5: 0.2 s).

Reported per run: completions, server restarts (target 0), requests aborted as stalled
(target 0), waiting requests (the daemon's status, peak of the sum over servers), queued
(SGLang's gauge, peak), retractions (the simulator's `sglang:num_retracted_requests_total`),
goodput (kept / generated tokens, the state DB's `token_ledger`; target >= 0.98), wasted
tokens by cause, wall time. The stall run: `stall` posted to one server's `/sim/fault` (the
fault `--sim-fault stall` starts with; posted at runtime so that only that life is stuck and
its time is known) `--fault-after-s` after every server is READY; reported: the time from the
fault to the daemon's verdict on that server (target <= hang_timeout_s + one probe interval),
and that no answer is lost (every prompt exactly once in the shards, none failed). Its
goodput is shown, not held to 0.98: a hung server's requests in flight are cut off.

Exits 1 when a target is missed. One table at the end.

    python benchmarks/bench_load.py [--quick] [--prompts 768] [--time-scale 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from harness import Daemon, config_dict, read_db, spawn  # noqa: E402
from supervisor.client.control_client import ControlClient, ControlUnreachable  # noqa: E402

# The seed's shape (see the docstring); the pool is what forces retractions.
RUNNING = 64
KV_POOL = 80_000
TOKENS_PER_S = 150.0          # one stream alone; ~50 tok/s each in a batch of 64
BATCH_KNEE = 32
CONTEXT = 40_960
SERVERS = 2
# A real node's timings (the defaults in supervisor/config/sections.py), divided by the
# time scale. stall_hang_window_s and saturation_calm_s likewise.
REAL = {"health_interval_s": 5.0, "health_timeout_s": 30.0, "hang_timeout_s": 600.0,
        "backoff_initial_s": 5.0, "backoff_max_s": 300.0, "stop_grace_s": 30.0,
        "drain_timeout_s": 300.0, "failure_window_s": 1800.0, "served_after_s": 300.0}
REAL_DISPATCH = {"stall_s": 120.0, "wait_s": 1800.0, "stall_hang_window_s": 300.0,
                 "saturation_calm_s": 60.0, "request_timeout_s": 3600.0}
GOODPUT_TARGET = 0.98
RETRACTED = re.compile(r"^sglang:num_retracted_requests_total\{[^}]*\}\s+([0-9.e+]+)", re.M)


@dataclass
class Run:
    name: str
    max_tokens: int
    fault_after_s: float | None = None      # wall seconds after every server is READY
    # measured
    wall_s: float = 0.0
    exit_code: int | None = None
    done: int = 0
    failed: int = 0
    prompts: int = 0
    restarts: int = 0
    stalled: int = 0
    waiting_peak: int = 0
    queued_peak: int = 0
    retractions: int = 0
    limit_low: int = 0                      # the saturation guard's lowest in-flight limit
    kept: int = 0
    wasted: dict[str, int] = field(default_factory=dict)
    verdict_s: float | None = None
    verdict: str = ""
    verdict_limit_s: float = 0.0
    once: bool = True
    shard_problem: str = ""
    missed: list[str] = field(default_factory=list)

    @property
    def goodput(self) -> float:
        generated = self.kept + sum(self.wasted.values())
        return self.kept / generated if generated else 0.0


def job_config(directory: Path, run: Run, prompts: int, scale: float) -> dict[str, Any]:
    data = config_dict(directory, servers=SERVERS, prompts=prompts)
    data["job"]["shard_size"] = 100
    data["generation"] = {"max_tokens": run.max_tokens, "enable_thinking": True}
    servers = data["servers"]
    servers["flags"] = {"max-running-requests": RUNNING, "max-total-tokens": KV_POOL,
                        "context-length": CONTEXT, "reasoning-parser": "qwen3",
                        "enable-metrics": True, "sim-tokens-per-s": TOKENS_PER_S,
                        "sim-batch-knee": BATCH_KNEE, "sim-time-scale": scale,
                        "sim-startup-s": 1.0}
    servers.update({k: v / scale for k, v in REAL.items()})
    data["dispatch"] = {k: v / scale for k, v in REAL_DISPATCH.items()}
    data["quality"] = {"metrics_window_s": 60.0 / scale}
    return data


def _retracted(client: httpx.Client, url: str) -> int | None:
    try:
        text = client.get(url + "/metrics", timeout=2.0).text
    except httpx.HTTPError:
        return None
    return int(sum(float(v) for v in RETRACTED.findall(text)))


class Watch:
    """Polls the daemon's status and each simulated server's /metrics while the job runs."""

    def __init__(self, daemon: Daemon, urls: list[str]) -> None:
        self.daemon = daemon
        self.urls = urls
        self.control = ControlClient(daemon.socket, timeout_s=5.0)
        self.http = httpx.Client(trust_env=False)
        # Retractions per server: a restarted server's counter starts again at 0, so the
        # lives before are banked.
        self._last = [0] * len(urls)
        self._banked = [0] * len(urls)
        self.waiting_peak = 0
        self.queued_peak = 0
        self.ready = False

    def poll(self) -> None:
        try:
            status = self.control.status()
        except ControlUnreachable:
            return
        self.ready = self.ready or all(s.state.value == "READY" for s in status.servers)
        self.waiting_peak = max(self.waiting_peak, sum(s.waiting for s in status.servers))
        self.queued_peak = max(self.queued_peak,
                               sum(s.sglang_queued or 0 for s in status.servers))
        for i, url in enumerate(self.urls):
            got = _retracted(self.http, url)
            if got is None:
                continue
            if got < self._last[i]:
                self._banked[i] += self._last[i]
            self._last[i] = got

    @property
    def retractions(self) -> int:
        return sum(self._banked) + sum(self._last)

    def close(self) -> None:
        self.control.close()
        self.http.close()


def run_job(base: Path, run: Run, prompts: int, scale: float, timeout_s: float) -> Run:
    directory = base / run.name
    if directory.exists():
        shutil.rmtree(directory)
    data = job_config(directory, run, prompts, scale)
    port0 = data["servers"]["base_port"]
    urls = [f"http://127.0.0.1:{port0 + i}" for i in range(SERVERS)]
    t0 = time.monotonic()
    daemon = Daemon(spawn(directory, data), directory, data["control"]["socket"])
    watch = Watch(daemon, urls)
    fault_at: float | None = None
    ready_at: float | None = None
    try:
        while daemon.proc.poll() is None:
            if time.monotonic() - t0 > timeout_s:
                run.missed.append(f"not finished within {timeout_s:.0f} s")
                break
            watch.poll()
            if watch.ready and ready_at is None:
                ready_at = time.monotonic()
            if (run.fault_after_s is not None and fault_at is None and ready_at is not None
                    and time.monotonic() - ready_at >= run.fault_after_s):
                # The last server's scheduler gets stuck (`--sim-fault stall`'s fault).
                watch.http.post(urls[-1] + "/sim/fault", json={"fault": "stall"},
                                timeout=5.0).raise_for_status()
                fault_at = time.time()
                print(f"  {run.name}: stall posted to gpu{SERVERS - 1}", flush=True)
            time.sleep(0.5)
    finally:
        watch.close()
        run.exit_code = daemon.stop()
    run.wall_s = time.monotonic() - t0
    run.waiting_peak, run.queued_peak = watch.waiting_peak, watch.queued_peak
    run.retractions = watch.retractions
    measure(directory, data, run, fault_at)
    return run


def measure(directory: Path, data: dict[str, Any], run: Run, fault_at: float | None) -> None:
    db = directory / "job.db"
    counts = dict(read_db(db, "SELECT status, count(*) FROM prompts GROUP BY status"))
    run.prompts = sum(counts.values())
    run.done, run.failed = counts.get("done", 0), counts.get("failed", 0)
    states = [(t, s, json.loads(d)) for t, s, d in read_db(
        db, "SELECT time, subject, detail FROM events WHERE kind = 'server_state' ORDER BY id")]
    # A restart: a life that ended in failure (BACKOFF, or FAILED), not our own stops.
    run.restarts = sum(1 for _, _, d in states if d.get("to") in ("BACKOFF", "FAILED"))
    limits = [json.loads(d).get("to") for (d,) in read_db(
        db, "SELECT detail FROM events WHERE kind = 'inflight_limit'")]
    run.limit_low = min([RUNNING, *(x for x in limits if isinstance(x, int))])
    run.stalled = int(read_db(db, "SELECT coalesce(sum(json_extract(detail, '$.count')), 0) "
                                  "FROM events WHERE kind = 'request_stalled'")[0][0])
    ledger = dict((c, t) for c, t in read_db(db, "SELECT cause, tokens FROM token_ledger"))
    run.kept = ledger.pop("kept", 0)
    run.wasted = {c: t for c, t in ledger.items() if t}
    s = data["servers"]
    run.verdict_limit_s = s["hang_timeout_s"] + s["health_interval_s"]
    if fault_at is not None:
        # The verdict: the stuck server's READY life ends (READY -> STOPPING, the reason);
        # the kind of failure is on the STOPPING -> BACKOFF event after it.
        stuck = [(t, d) for t, subj, d in states if subj == f"gpu{SERVERS - 1}" and t >= fault_at]
        ended = next((i for i, (_, d) in enumerate(stuck) if d.get("from") == "READY"), None)
        if ended is not None:
            t, d = stuck[ended]
            kind = next((e.get("exit_kind") for _, e in stuck[ended:] if e.get("exit_kind")), "?")
            run.verdict_s = t - fault_at
            run.verdict = f"{kind}: {d.get('reason', '')}"
    check_shards(directory / data["job"]["output"], db, run)


def check_shards(output: Path, db: Path, run: Run) -> None:
    ids = {i for (i,) in read_db(db, "SELECT id FROM prompts")}
    seen: dict[str, int] = {}
    for path in sorted(output.glob("*.jsonl")):
        with open(path, "rb") as f:
            for line in f:
                pid = json.loads(line)["id"]
                seen[pid] = seen.get(pid, 0) + 1
    twice = [i for i, n in seen.items() if n > 1]
    missing = ids - seen.keys()
    run.once = not twice and not missing and seen.keys() <= ids
    if not run.once:
        run.shard_problem = (f"{len(missing)} prompts missing from the shards, "
                             f"{len(twice)} twice (e.g. {sorted(missing)[:3] + twice[:3]})")


def judge(run: Run) -> None:
    if run.exit_code != 0:
        run.missed.append(f"daemon exited {run.exit_code}")
    if run.done != run.prompts or run.failed:
        run.missed.append(f"{run.done}/{run.prompts} done, {run.failed} failed")
    if not run.once:
        run.missed.append(run.shard_problem)
    if run.fault_after_s is None:
        if run.restarts:
            run.missed.append(f"{run.restarts} server restarts (target 0)")
        if run.stalled:
            run.missed.append(f"{run.stalled} requests aborted as stalled (target 0)")
        if run.goodput < GOODPUT_TARGET:
            run.missed.append(f"goodput {run.goodput:.4f} (target >= {GOODPUT_TARGET})")
    else:
        if run.verdict_s is None:
            run.missed.append("no verdict on the stuck server")
        elif run.verdict_s > run.verdict_limit_s:
            run.missed.append(f"verdict after {run.verdict_s:.1f} s (target <= "
                              f"{run.verdict_limit_s:.1f} s)")
        if run.restarts != 1:
            run.missed.append(f"{run.restarts} server restarts (expected 1: the stuck one)")


def table(runs: list[Run], scale: float) -> str:
    rows = [("run", "done", "restarts", "stalled", "waiting peak", "queued peak",
             "retractions", "limit low", "goodput", "wasted tokens by cause", "verdict", "wall", "")]
    for r in runs:
        waste = ", ".join(f"{c} {t:,}" for c, t in sorted(r.wasted.items())) or "none"
        verdict = "-" if r.fault_after_s is None else (
            "none" if r.verdict_s is None else
            f"{r.verdict_s:.1f} s ({r.verdict_s * scale:.0f} sim s) <= {r.verdict_limit_s:.1f}")
        rows.append((r.name, f"{r.done}/{r.prompts}", str(r.restarts), str(r.stalled),
                     str(r.waiting_peak), str(r.queued_peak), f"{r.retractions:,}", str(r.limit_low),
                     f"{r.goodput:.4f}", waste, verdict, f"{r.wall_s:.0f} s",
                     "ok" if not r.missed else "MISSED"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                     for row in rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 192 prompts a run, time scale 10 (about 2 minutes)")
    p.add_argument("--prompts", type=int, help="prompts per run (default 768; quick 192)")
    p.add_argument("--time-scale", type=float,
                   help="simulated seconds per wall second (default 5; quick 10)")
    p.add_argument("--fault-after-s", type=float,
                   help="the stall run: wall seconds after READY (default 30; quick 8)")
    p.add_argument("--only", choices=("8192", "32768", "stall"), action="append",
                   help="run only these (repeatable)")
    p.add_argument("--dir", help="keep each run's directory here (default: a temporary one)")
    p.add_argument("--timeout-s", type=float, default=900.0, help="per run")
    args = p.parse_args()
    prompts = args.prompts or (192 if args.quick else 768)
    scale = args.time_scale or (10.0 if args.quick else 5.0)
    fault_after = args.fault_after_s or (8.0 if args.quick else 30.0)
    if prompts < 1 or scale <= 0 or fault_after <= 0:
        p.error("--prompts, --time-scale and --fault-after-s must be above 0")
    runs = [Run("8192", 8192), Run("32768", 32768), Run("stall", 8192, fault_after)]
    runs = [r for r in runs if not args.only or r.name in args.only]
    print(f"{len(runs)} runs of {prompts} prompts on {SERVERS} simulated servers x "
          f"{RUNNING} running, KV pool {KV_POOL:,} tokens; time scale {scale:g} "
          f"(one simulated second = {1 / scale:.2f} s)", flush=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        base = Path(args.dir) if args.dir else Path(tmp)
        for run in runs:
            print(f"  {run.name}: running", flush=True)
            run_job(base, run, prompts, scale, args.timeout_s)
            judge(run)
            print(f"  {run.name}: {run.done}/{run.prompts} done in {run.wall_s:.0f} s"
                  + "".join(f"; MISSED: {m}" for m in run.missed), flush=True)
    print(table(runs, scale))
    missed = [f"{r.name}: {m}" for r in runs for m in r.missed]
    for m in missed:
        print("target missed:", m)
    return 1 if missed else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
