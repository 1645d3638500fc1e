"""Time from a daemon's start to its first completion: cold (the servers load their model)
against adopted (a daemon SIGKILLed mid-run, the next one on the same state DB adopts the
servers it left). Both measured in the same round, on the same machine, medians over rounds.

Each round: `dflash-supervisor run` on 2 simulated servers whose loading takes
`--load-s` seconds (the simulator's --sim-startup-s, at time scale 1), stopped with SIGKILL
once 20 prompts are done; then `run` again on the same config and DB, stopped with SIGTERM
(every server stopped) once its first completion is in. "First completion" is the earliest
`finished_at` in the state DB at or after the daemon's start; a request takes 256 / 400 s
(0.64 s) of decoding, included in both.

    python benchmarks/bench_adoption.py [--rounds 3] [--load-s 30]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import config_dict, read_db, spawn  # noqa: E402


def _first_completion(db: Path, t0: float, proc: subprocess.Popen[bytes],
                      timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"daemon exited {proc.returncode}")
        try:
            got = read_db(db, "SELECT min(finished_at) FROM prompts WHERE status = 'done' "
                              "AND finished_at >= ?", t0)[0][0]
        except Exception:  # noqa: BLE001 - the DB may not exist yet
            got = None
        if got is not None:
            return got - t0
        time.sleep(0.02)
    raise SystemExit(f"no completion within {timeout_s:g} s")


def _done(db: Path) -> int:
    return read_db(db, "SELECT count(*) FROM prompts WHERE status = 'done'")[0][0]


def one_round(directory: Path, load_s: float) -> tuple[float, float]:
    data = config_dict(directory, servers=2, prompts=2000)
    data["servers"]["startup_timeout_s"] = load_s + 60
    data["servers"]["flags"].update({"sim-tokens-per-s": 400, "sim-time-scale": 1.0,
                                     "sim-startup-s": load_s})
    db = directory / "job.db"
    t0 = time.time()
    first = spawn(directory, data)
    try:
        cold = _first_completion(db, t0, first, load_s + 120)
        deadline = time.monotonic() + 60
        while _done(db) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    t0 = time.time()
    second = spawn(directory, data)
    try:
        adopted = _first_completion(db, t0, second, load_s + 120)
    finally:
        second.send_signal(signal.SIGTERM)
        try:
            second.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait()
    log = (directory / "daemon.log").read_text(errors="replace")
    if log.count("adopting pid") != 2:
        raise SystemExit(f"the second daemon did not adopt both servers: {log[-3000:]}")
    return cold, adopted


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--load-s", type=float, default=30.0)
    args = p.parse_args()
    colds, adopteds = [], []
    with tempfile.TemporaryDirectory(prefix="bench-adoption-") as tmp:
        for i in range(args.rounds):
            cold, adopted = one_round(Path(tmp) / f"round{i}", args.load_s)
            colds.append(cold)
            adopteds.append(adopted)
            print(f"round {i + 1}: cold {cold:.2f} s, adopted {adopted:.2f} s", flush=True)
    c, a = statistics.median(colds), statistics.median(adopteds)
    print(f"median over {args.rounds} rounds (servers load {args.load_s:g} s): "
          f"cold {c:.2f} s, adopted {a:.2f} s, adopted/cold {a / c:.3f}")


if __name__ == "__main__":
    main()
