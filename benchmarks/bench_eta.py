"""The length-aware ETA against the windowed req/s ETA, in the same run, against the real
finish time.

A whole job on 3 simulated servers (real processes, the simulator's lengths: lognormal,
~18% past 4,096 tokens) through the real dispatcher and store. At 2%, 5%, 10% and 50% of
the job both ETAs are read; when the last prompt is done, each is scored against the time
that was really left: error = (ETA - actual) / actual. Every second both are sampled too,
for the median absolute error over the job and the share of the time the actual finish
fell inside the 80% interval.

Time is compressed by the simulator's --sim-time-scale. The metrics window (`--window-s`,
default 20 s) is then *more* generous to the windowed ETA than a real job's 60 s: at time
scale 20 it is 400 s of real decoding. (60 s / 20 = 3 s would be the like-for-like window,
but the rate window counts in one-second buckets, which over 3 s overstates the rate by up
to a third: an artefact, not the estimator's fault.)

    python benchmarks/bench_eta.py [--prompts 12000] [--slots 32] [--time-scale 20] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_dispatch import start_sims, stop_sims  # noqa: E402
from benchmarks.harness import read_db  # noqa: E402
from state.async_store import AsyncStore  # noqa: E402
from state.records import ImportRow  # noqa: E402
from state.store import Store  # noqa: E402
from supervisor.config import parse_config  # noqa: E402
from supervisor.dispatch.dispatcher import Dispatcher  # noqa: E402
from supervisor.dispatch.length_eta import EtaEstimate  # noqa: E402
from supervisor.dispatch.rate_window import eta_seconds  # noqa: E402
from supervisor.servers.endpoint import Endpoint  # noqa: E402

MARKS = (0.02, 0.05, 0.10, 0.50)


@dataclass(frozen=True)
class Reading:
    t: float                     # seconds since the job started
    done: int
    length: EtaEstimate
    windowed: float | None
    windowed_warming: bool


async def run_job(urls: list[str], n: int, slots: int, window_s: float,
                  sample_s: float) -> tuple[list[Reading], dict[float, Reading], float]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "job.db")
        store.import_batch([ImportRow(f"p{i:07d}", [{"role": "user", "content":
                                      f"ETA benchmark prompt {i}: explain something."}], i + 1)
                            for i in range(n)])
        astore = AsyncStore(store)
        cfg = parse_config({
            "job": {"model": "bench"}, "generation": {"max_tokens": 4096},
            "servers": {"count": len(urls), "model_path": "m",
                        "flags": {"reasoning-parser": "qwen3"}},
            "dispatch": {"max_in_flight_per_server": slots, "request_timeout_s": 600.0},
            "quality": {"max_bad_rate": 1.0, "metrics_window_s": window_s}},
            base_dir=Path(tmp))
        d = Dispatcher(astore, cfg)
        readings: list[Reading] = []
        marks: dict[float, Reading] = {}
        try:
            async with d.running():
                t0 = d.clock()
                draining = anyio.Event()
                async with anyio.create_task_group() as tg:
                    for i, url in enumerate(urls):
                        tg.start_soon(d.serve, Endpoint(f"gpu{i}", url, slots), draining)
                    next_sample = 0.0
                    while True:
                        counts = await astore.call(Store.counts)
                        now = d.clock()
                        if counts.done >= n:
                            end = now - t0
                            break
                        due = [m for m in MARKS if m not in marks and counts.done >= m * n]
                        if due or now - t0 >= next_sample:
                            left = counts.pending + counts.in_flight
                            rates = d.rates.snapshot(now)
                            r = Reading(now - t0, counts.done,
                                        d.eta.estimate(max(0, left - d.eta.running),
                                                       d.max_tokens, now),
                                        eta_seconds(n - counts.done, rates.req_per_s),
                                        rates.warming_up)
                            for m in due:
                                marks[m] = r
                            if now - t0 >= next_sample:
                                readings.append(r)
                                next_sample += sample_s
                        await anyio.sleep(0.02)
                    draining.set()
                    tg.cancel_scope.cancel()
            # What the estimator was after: the job's real mean length and decode rate.
            tokens, seconds = read_db(
                Path(tmp) / "job.db",
                "SELECT sum(completion_tokens), sum(finished_at - started_at) FROM prompts")[0]
        finally:
            store.close()
        return readings, marks, end, tokens / n, tokens / seconds


def _err(eta: float | None, actual: float) -> float | None:
    return None if eta is None or actual <= 0 else (eta - actual) / actual


def _pct(x: float | None) -> str:
    return "   --  " if x is None else f"{100 * x:+6.1f}%"


def one_run(args: argparse.Namespace, seed: int) -> dict[float, tuple[float | None, float | None]]:
    """One job with the simulator's lengths drawn from `seed`; prints its table and returns
    {mark: (length ETA error, windowed ETA error)}."""
    window = args.window_s
    print(f"-- seed {seed}: {args.prompts} prompts, {args.servers} servers x {args.slots} slots, "
          f"{args.tokens_per_s:g} tok/s per request x{args.time_scale:g} time scale, "
          f"max_tokens 4096, metrics window {window:g} s")
    sims = start_sims(args.servers, [
        "--max-running-requests", str(args.slots), "--sim-tokens-per-s", str(args.tokens_per_s),
        "--sim-time-scale", str(args.time_scale), "--sim-seed", str(seed)])
    try:
        wall = time.perf_counter()
        readings, marks, end, mean_len, rate = anyio.run(run_job, [u for _, u in sims], args.prompts,
                                         args.slots, window, 1.0)
        wall = time.perf_counter() - wall
    finally:
        stop_sims(sims)
    print(f"job finished in {end:.1f} s (wall {wall:.1f} s); real mean length {mean_len:.0f} "
          f"tokens, real decode rate {rate:.0f} tok/s per request\n")
    print(" at job  elapsed  actual left | length ETA [80% interval]        error  warm |"
          " windowed ETA   error  warm")
    errors = {}
    for m in MARKS:
        r = marks[m]
        actual = end - r.t
        e = r.length
        interval = ("--" if e.low_s is None else f"[{e.low_s:7.1f}, {e.high_s:7.1f}]")
        inside = e.low_s is not None and e.low_s <= actual <= e.high_s
        errors[m] = (_err(e.eta_s, actual), _err(r.windowed, actual))
        print(f"  {100 * m:4.0f}%  {r.t:6.1f}s  {actual:9.1f}s  | "
              f"{(e.eta_s or float('nan')):8.1f}s {interval:>20} {'in ' if inside else 'OUT'}"
              f" {_pct(errors[m][0])}  {'yes' if e.warming_up else 'no ':3} |"
              f" {(r.windowed or float('nan')):9.1f}s  {_pct(errors[m][1])}"
              f"  {'yes' if r.windowed_warming else 'no'}")
    print("\n at job  E[length]  decode tok/s  in flight x rate = tok/s")
    for m in MARKS:
        e = marks[m].length
        print(f"  {100 * m:4.0f}%  {e.expected_tokens or 0:8.0f}  {e.decode_tok_per_s or 0:11.0f}"
              f"  {e.tok_per_s or 0:26.0f}")
    span = [r for r in readings if 0.02 * args.prompts <= r.done <= 0.9 * args.prompts]
    pairs = [(abs(a), abs(b)) for r in span
             if (a := _err(r.length.eta_s, end - r.t)) is not None
             and (b := _err(r.windowed, end - r.t)) is not None]
    le, we = [a for a, _ in pairs], [b for _, b in pairs]
    cover = [r.length.low_s <= end - r.t <= r.length.high_s for r in span
             if r.length.low_s is not None]
    if le and we:
        print(f"\nsampled every second from 2% to 90% of the job ({len(span)} readings): median "
              f"|error| length {100 * statistics.median(le):.1f}%, windowed "
              f"{100 * statistics.median(we):.1f}%; the length ETA closer in "
              f"{sum(a < b for a, b in pairs)}/{len(pairs)}; actual finish "
              f"inside the 80% interval {100 * sum(cover) / max(1, len(cover)):.0f}% of the time\n")
    return errors


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=12000)
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--tokens-per-s", type=float, default=50.0, help="per request, unscaled")
    ap.add_argument("--time-scale", type=float, default=20.0)
    ap.add_argument("--window-s", type=float, default=20.0, help="metrics window")
    ap.add_argument("--seeds", default="0",
                    help="comma-separated simulator seeds: one job each, medians over them")
    args = ap.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    runs = [one_run(args, seed) for seed in seeds]
    if len(runs) < 2:
        return
    print(f"over {len(runs)} jobs (seeds {args.seeds}): median |error| at each point")
    print(" at job   length  windowed  length closer")
    for m in MARKS:
        pairs = [(abs(a), abs(b)) for run in runs
                 if (a := run[m][0]) is not None and (b := run[m][1]) is not None]
        if pairs:
            print(f"  {100 * m:4.0f}%  {100 * statistics.median(a for a, _ in pairs):6.1f}%  "
                  f"{100 * statistics.median(b for _, b in pairs):7.1f}%  "
                  f"{sum(a < b for a, b in pairs)}/{len(pairs)}")


if __name__ == "__main__":
    main()
