"""Import benchmark: 1,000,000 generated prompts (~300 bytes each).

Three timings, each in a fresh child process on a fresh DB (so each peak RSS is its own):
- `import`    the whole `import_file` path: read the JSONL, decode, validate, hash-free ids,
              batch into `Store.import_batch`. This is what `dflash-supervisor import` does.
- `store`     `Store.import_batch` alone, fed ImportRows already in memory.
- `raw`       the baseline: plain sqlite3 `executemany` of the same (id, messages, source_line)
              rows into the same `prompts` table (same schema, indexes and pragmas), one
              transaction, rows pre-built outside the timing.
Ratio = raw seconds / path seconds (1.0 = as fast as raw SQLite; the target is >= 0.5).
Median of --runs runs. Peak RSS is the child's ru_maxrss (whole process, Python included).

    .venv/bin/python benchmarks/bench_import.py [--prompts 1000000] [--runs 3]
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

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray").split()


def prompt_text(i: int) -> str:
    # ~250 characters of varied text, so each JSONL line is ~300 bytes.
    words = [WORDS[(i * 7 + k * 13) % len(WORDS)] for k in range(36)]
    return f"Question {i}: explain " + " ".join(words) + "?"


def line(i: int) -> str:
    return json.dumps({"id": f"b{i:07d}",
                       "messages": [{"role": "user", "content": prompt_text(i)}]},
                      ensure_ascii=False)


def generate(path: Path, n: int) -> int:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(line(i) + "\n")
    return path.stat().st_size


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # KiB on Linux


def child(mode: str, prompts: Path, db: Path) -> dict:
    from state.records import ImportRow
    from state.store import Store
    from supervisor.prompts.prompt_import import import_file

    n = 0
    if mode == "import":
        store = Store.open(db)
        t0 = time.perf_counter()
        summary = import_file(store, prompts)
        elapsed = time.perf_counter() - t0
        n = summary.imported
        store.close()
    elif mode == "store":
        with open(prompts, encoding="utf-8") as f:
            rows = []
            for k, text in enumerate(f, 1):
                obj = json.loads(text)
                rows.append(ImportRow(obj["id"], obj["messages"], k))
        store = Store.open(db)
        t0 = time.perf_counter()
        for start in range(0, len(rows), 5000):
            n += store.import_batch(rows[start:start + 5000])[0]
        elapsed = time.perf_counter() - t0
        store.close()
    elif mode == "raw":
        Store.open(db).close()                 # the same table, indexes and pragmas
        with open(prompts, encoding="utf-8") as f:
            tuples = []
            for k, text in enumerate(f, 1):
                obj = json.loads(text)
                tuples.append((obj["id"], json.dumps(obj["messages"], ensure_ascii=False,
                                                     separators=(",", ":")), k))
        con = sqlite3.connect(db, isolation_level=None)
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("PRAGMA synchronous = NORMAL")
        t0 = time.perf_counter()
        con.execute("BEGIN")
        con.executemany("INSERT OR IGNORE INTO prompts (id, messages, source_line) "
                        "VALUES (?, ?, ?)", tuples)
        con.execute("COMMIT")
        elapsed = time.perf_counter() - t0
        n = con.execute("SELECT count(*) FROM prompts").fetchone()[0]
        con.close()
    else:
        raise SystemExit(f"unknown mode {mode}")
    return {"mode": mode, "seconds": elapsed, "rows": n, "peak_rss_mb": _peak_rss_mb()}


def run_child(mode: str, prompts: Path, db: Path) -> dict:
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    out = subprocess.run([sys.executable, __file__, "--child", mode, str(prompts), str(db)],
                         check=True, capture_output=True, text=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--prompts", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dir", help="work directory (default: a temporary one)")
    p.add_argument("--child", nargs=3, metavar=("MODE", "PROMPTS", "DB"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        mode, prompts, db = args.child
        print(json.dumps(child(mode, Path(prompts), Path(db))))
        return 0
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        prompts = work / "prompts.jsonl"
        size = generate(prompts, args.prompts)
        print(f"{args.prompts} prompts, {size / 1e6:.1f} MB ({size / args.prompts:.0f} bytes/line)")
        results: dict[str, list[dict]] = {"import": [], "store": [], "raw": []}
        for r in range(args.runs):
            for mode in results:
                got = run_child(mode, prompts, work / f"{mode}.db")
                assert got["rows"] == args.prompts, got
                results[mode].append(got)
                print(f"  run {r + 1} {mode:<6} {got['seconds']:7.2f} s  "
                      f"peak RSS {got['peak_rss_mb']:6.1f} MB", flush=True)
        med = {m: statistics.median(g["seconds"] for g in v) for m, v in results.items()}
        rss = {m: max(g["peak_rss_mb"] for g in v) for m, v in results.items()}
        db_mb = (work / "import.db").stat().st_size / 1e6
    print(f"median of {args.runs}:")
    print(f"  import_file (JSONL -> DB)     {med['import']:6.2f} s  "
          f"{args.prompts / med['import']:9.0f} prompts/s  ratio to raw {med['raw'] / med['import']:.2f}x"
          f"  peak RSS {rss['import']:.1f} MB")
    print(f"  Store.import_batch (rows -> DB) {med['store']:4.2f} s  "
          f"{args.prompts / med['store']:9.0f} prompts/s  ratio to raw {med['raw'] / med['store']:.2f}x"
          f"  peak RSS {rss['store']:.1f} MB (rows held in memory)")
    print(f"  raw sqlite3 executemany       {med['raw']:6.2f} s  "
          f"{args.prompts / med['raw']:9.0f} prompts/s  peak RSS {rss['raw']:.1f} MB "
          f"(rows held in memory)")
    print(f"  DB size {db_mb:.0f} MB")
    ok = rss["import"] < 150 and med["raw"] / med["import"] >= 0.5
    print("targets (import ratio >= 0.5x, import peak RSS < 150 MB):", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
