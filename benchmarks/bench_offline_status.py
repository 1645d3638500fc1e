"""Offline `status` at seed scale: `dflash-supervisor status --state DB` with no daemon, on a
3,000-prompt DB and on a 900,000-prompt DB of the same shape (the baseline is the small DB,
measured in the same run; the target is 900K within 1.5x of 3K).

Each DB is built synthetically in seconds: the schema by `Store.open` (so its counters and
triggers are the product's), then one `INSERT ... WITH RECURSIVE` of the rows (setup only;
the daemon never writes SQL outside state/): every prompt answered, one in six truncated
(a fifth of those looping, one in eleven answers blank: cut off inside the thinking), the
answers `--answer-bytes` long, shards recorded as uploaded, 200 events; the status counts
set to match, the truncation counts kept by the DB's own insert trigger; then closed the
way the daemon closes it on a clean stop (checkpointed, rollback journal).

Timed, medians of --runs, warm page cache (the DB was just written; a cold read of a few
pages adds a few disk seeks, whatever the DB's size):
- `command`  the whole command in a fresh process, as an operator runs it (interpreter
             start and imports included: the floor of any command);
- `reads`    in process: opening the DB read-only and every figure status prints;
- `before`   in process, what the same figures cost before this version: the whole-file
             `PRAGMA quick_check` on open and the truncated answers counted from the rows.

    .venv/bin/python benchmarks/bench_offline_status.py [--prompts 900000] [--small 3000]
        [--answer-bytes 1000] [--runs 7] [--skip-before] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build(path: Path, n: int, answer_bytes: int) -> None:
    from state.store import Store

    Store.open(path).close()                       # schema, counters, triggers
    half = max(1, answer_bytes // 4)               # hex() doubles: content + reasoning
    shards = (n + 499) // 500
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("BEGIN")
    con.execute(
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) "
        "INSERT INTO shards (id, key, status, records, bytes, sha256, assigned_at, "
        "written_at, uploaded_at) SELECT i, printf('shard-%06d.jsonl', i), 'uploaded', 500, "
        "500 * ?, hex(randomblob(32)), 1.0, 2.0, 3.0 FROM s", (shards, answer_bytes))
    con.execute(
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) "
        "INSERT INTO prompts (id, messages, source_line, status, attempts, content, "
        "reasoning_content, finish_reason, prompt_tokens, completion_tokens, max_tokens, "
        "model, server, started_at, finished_at, loop, shard_id) "
        "SELECT printf('p%07d', i), "
        "'[{\"role\":\"user\",\"content\":\"' || hex(randomblob(120)) || '\"}]', i, 'done', 1, "
        "CASE WHEN i % 11 = 0 THEN '' ELSE hex(randomblob(?)) END, hex(randomblob(?)), "
        "CASE WHEN i % 6 = 0 THEN 'length' ELSE 'stop' END, 80, 2000, 4096, 'm', 'gpu0', "
        "1.0, 2.0, CASE WHEN i % 30 = 0 THEN 1 ELSE 0 END, (i + 499) / 500 FROM s",
        (n, half, half))
    con.execute("UPDATE status_counts SET n = CASE status WHEN 'done' THEN ? ELSE 0 END", (n,))
    con.executemany("INSERT INTO events (time, kind, subject, detail, actor) "
                    "VALUES (?, 'control_action', 'job', '{}', 'operator')",
                    [(float(i),) for i in range(200)])
    con.execute("COMMIT")
    con.close()
    with Store.open(path) as store:
        store.close_for_readers()


def time_command(path: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DFLASH_SOCKET", None)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "supervisor", "status", "--state", str(path),
                    "--socket", str(path.parent / "none.sock")], check=True,
                   capture_output=True, env=env)
    return time.perf_counter() - t0


def time_reads(path: Path) -> float:
    from supervisor.commands.offline_status import main as offline_main
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        assert offline_main(str(path), events=10) == 0
    return time.perf_counter() - t0


def time_before(path: Path) -> float:
    """The figures as the previous version got them: quick_check over the whole file on
    open, the truncated answers counted from their rows."""
    from state.store import Store
    t0 = time.perf_counter()
    with Store.open_readonly(path) as store:
        (ok,) = store._conn.execute("PRAGMA quick_check(20)").fetchone()
        assert ok == "ok"
        store.counts()
        store.truncation_recount()
        store.token_ledger()
        store.upload_totals()
        store.recent_events(10)
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=900_000)
    p.add_argument("--small", type=int, default=3_000)
    p.add_argument("--answer-bytes", type=int, default=1_000,
                   help="answer text per prompt (the seed's is ~11,500; status reads none)")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--skip-before", action="store_true",
                   help="do not time the previous version's reads (a minute at 900K)")
    p.add_argument("--dir", help="work directory (default: a temporary one)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        sizes = {"small": args.small, "large": args.prompts}
        paths: dict[str, Path] = {}
        for name, n in sizes.items():
            paths[name] = Path(tmp) / f"{name}.db"
            t0 = time.perf_counter()
            build(paths[name], n, args.answer_bytes)
            print(f"  setup: {n} prompts, {paths[name].stat().st_size / 1e6:.0f} MB, "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
        kinds = ["command", "reads"] + ([] if args.skip_before else ["before"])
        timers = {"command": time_command, "reads": time_reads, "before": time_before}
        got: dict[tuple[str, str], list[float]] = {(k, s): [] for k in kinds for s in sizes}
        for r in range(args.runs):
            for kind in kinds:
                for name in sizes:       # interleaved: a busy moment hits both sizes alike
                    got[(kind, name)].append(timers[kind](paths[name]))
            print(f"  run {r + 1}: " + "  ".join(
                f"{k} {got[(k, 'small')][-1] * 1e3:.1f}/{got[(k, 'large')][-1] * 1e3:.1f} ms"
                for k in kinds), flush=True)
    print(f"median of {args.runs} (small {args.small} / large {args.prompts} prompts, "
          f"{args.answer_bytes} B answers):")
    for kind in kinds:
        small = statistics.median(got[(kind, "small")])
        large = statistics.median(got[(kind, "large")])
        print(f"  {kind:<8} {small * 1e3:8.1f} ms  {large * 1e3:8.1f} ms  "
              f"ratio {large / small:5.2f}x")
    ratio = (statistics.median(got[("command", "large")])
             / statistics.median(got[("command", "small")]))
    print("target (command at the large size within 1.5x of the small):",
          "met" if ratio <= 1.5 else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
