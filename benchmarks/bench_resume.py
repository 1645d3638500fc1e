"""Resume benchmark: a 1,000,000-prompt state DB with half of it done (and sharded), a few
hundred prompts left in flight by a killed daemon, and the prompts file unchanged.

Timed, in a fresh child process each run (so nothing is cached in Python): what the daemon
does at start before its first request can go out —
  Store.open (WAL, schema check) -> recover_in_flight -> the import step (skipped: the
  file's fingerprint matches) -> counts -> shards left to write -> first claim of 256.
The target is < 2 s. Setup builds the DB through the real import, then marks half of it done
with one bulk UPDATE (setup only; the daemon never writes SQL outside state/) and assigns
shards through Store.assign_shards, as the shard writer would.

The OS page cache is warm (the DB was just written); a cold start on a slow disk reads more.
The baseline, measured in the same run, is plain sqlite3 opening the same DB and reading
`SELECT count(*) FROM prompts WHERE status = 'pending'` — the cheapest honest "how much is
left" a hand-written resume would do.

    .venv/bin/python benchmarks/bench_resume.py [--prompts 1000000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

IN_FLIGHT_LEFT = 300


def build(work: Path, n: int) -> Path:
    from bench_import import generate
    from state.store import Store
    from supervisor.config import parse_config
    from supervisor.job.store_setup import import_prompts
    from supervisor.shards.keys import shard_key_for

    prompts = work / "prompts.jsonl"
    generate(prompts, n)
    cfg = parse_config({"job": {"prompts": str(prompts), "state": str(work / "job.db"),
                                "output": str(work / "out")},
                        "servers": {"count": 1, "model_path": "m"},
                        "generation": {"enable_thinking": False}}, base_dir=work)
    store = Store.open(work / "job.db")
    t0 = time.perf_counter()
    import_prompts(store, cfg)
    print(f"  setup: imported {n} prompts in {time.perf_counter() - t0:.1f} s", flush=True)
    store.close()
    con = sqlite3.connect(work / "job.db", isolation_level=None)
    half = n // 2
    now = time.time()
    con.execute("BEGIN")
    con.execute("UPDATE prompts SET status='done', attempts=1, content='answer', "
                "reasoning_content='thinking', finish_reason='stop', prompt_tokens=80, "
                "completion_tokens=2000, max_tokens=4096, model='m', server='gpu0', "
                "started_at=?, finished_at=? WHERE rowid <= ?", (now, now, half))
    con.execute("UPDATE prompts SET status='in_flight', server='gpu0', started_at=? "
                "WHERE rowid > ? AND rowid <= ?", (now, half, half + IN_FLIGHT_LEFT))
    con.execute("UPDATE status_counts SET n = CASE status WHEN 'done' THEN ? "
                "WHEN 'in_flight' THEN ? WHEN 'pending' THEN ? ELSE 0 END",
                (half, IN_FLIGHT_LEFT, n - half - IN_FLIGHT_LEFT))
    con.execute("COMMIT")
    con.close()
    store = Store.open(work / "job.db")
    t0 = time.perf_counter()
    store.assign_shards(500, shard_key_for(None), flush=False)
    for shard in store.shards_to_write():       # as if written: the timing must not redo it
        store.mark_shard_written(shard.id, 500, 0, "0" * 64, "0" * 32, time.time())
    print(f"  setup: {half // 500} shards assigned in {time.perf_counter() - t0:.1f} s",
          flush=True)
    store.close()
    (work / "config.json").write_text(json.dumps({"prompts": str(prompts),
                                                  "db": str(work / "job.db")}))
    return work


def child(work: Path, mode: str) -> dict:
    paths = json.loads((work / "config.json").read_text())
    t0 = time.perf_counter()
    if mode == "raw":
        con = sqlite3.connect(paths["db"])
        pending = con.execute("SELECT count(*) FROM prompts WHERE status = 'pending'").fetchone()[0]
        con.close()
        detail = {"pending": pending}
    else:
        from state.store import Store
        from supervisor.config import parse_config
        from supervisor.job.store_setup import import_prompts

        cfg = parse_config({"job": {"prompts": paths["prompts"], "state": paths["db"],
                                    "output": str(work / "out")},
                            "servers": {"count": 1, "model_path": "m"},
                        "generation": {"enable_thinking": False}}, base_dir=work)
        store = Store.open(paths["db"])
        recovered = store.recover_in_flight()
        import_prompts(store, cfg)
        counts = store.counts()
        to_write = store.shards_to_write()
        claimed = store.claim(256, "gpu0", time.time())
        detail = {"recovered": recovered, "pending": counts.pending, "done": counts.done,
                  "to_write": len(to_write), "claimed": len(claimed)}
        store.close()
    elapsed = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {"seconds": elapsed, "peak_rss_mb": rss, **detail}


def reset_in_flight(work: Path) -> None:
    """Undo the timed run's claim and recovery, so every run starts from the same state."""
    from state.store import Store
    store = Store.open(json.loads((work / "config.json").read_text())["db"])
    store.recover_in_flight()
    # Put IN_FLIGHT_LEFT prompts back in flight through a claim, as a killed daemon leaves them.
    store.claim(IN_FLIGHT_LEFT, "gpu0", time.time())
    store.close()


def run_child(work: Path, mode: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(work), mode], check=True,
                         capture_output=True, text=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--prompts", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--dir", help="work directory (default: a temporary one)")
    p.add_argument("--child", nargs=2, metavar=("WORK", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[0]), args.child[1])))
        return 0
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = build(Path(tmp), args.prompts)
        runs: dict[str, list[dict]] = {"resume": [], "raw": []}
        for r in range(args.runs):
            for mode in runs:
                got = run_child(work, mode)
                runs[mode].append(got)
                print(f"  run {r + 1} {mode:<6} {got['seconds']:6.3f} s  "
                      f"peak RSS {got['peak_rss_mb']:5.1f} MB  "
                      + " ".join(f"{k}={v}" for k, v in got.items()
                                 if k not in ("seconds", "peak_rss_mb")), flush=True)
            reset_in_flight(work)
    med = {m: statistics.median(g["seconds"] for g in v) for m, v in runs.items()}
    print(f"median of {args.runs}: resume to first claim {med['resume']:.3f} s, "
          f"raw count(*) of pending {med['raw']:.3f} s "
          f"(resume / raw {med['resume'] / med['raw']:.2f}x)")
    print("target (resume < 2 s):", "met" if med["resume"] < 2.0 else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
