"""Seed scale: the job this tool exists for, 900,000 thinking answers of ~11.5 KB on one node,
taken to 100% done and measured on the way.

Prompts: every turn of the 160 MT-bench and Vicuna-bench questions in ../shared/data (read
at run time, never stored here), in variants (turn pairs, a numbered request, a second turn),
so lines are real text of real lengths and every id is distinct.

The shortcut, and why it is faithful: 900K answers through simulated servers would take
~2.5 hours on this machine even with instant servers (the daemon records ~100-250 answers/s
on two shared cores), so most answers are written in bulk, in this process, through the
daemon's own recording path (`Store.claim` then `Store.record([Done...])`, 2,000 a
transaction), and shards through the daemon's own `ShardWriter` into the local output, marked
uploaded as the uploader does after its read-back. The DB and the output are then what the
daemon would have left: the same rows, indexes, triggers, counts and shard files. What the
shortcut skips is the HTTP, the streaming and the per-answer checks, i.e. the daemon's CPU per
answer; those are measured on the real daemon, which runs a slice on fast simulated servers
(instant answers of the same size, a delta per 16 tokens) on that DB at 5%, 50% and the last
stretch to 100%: its RSS, its CPU per answer and the live status and the TUI against it come
from those slices, on a DB of the size the job has then. The same live figures are taken first
on a 3K-prompt job at 50% (`--baseline`), which the 900K figures are held against.

Reported (one JSON line per stage, with its time since the start and the load average):
- import: time and peak RSS of the import (a fresh process), DB bytes per prompt;
- DB bytes per answer, and the output's bytes at the end;
- state backup per 15-minute interval (9,000 answers at 10 answers/s between two backups):
  the chunks that changed (supervisor/state_backup/chunks.py), time and bytes; before chunks
  a backup put the whole DB (its size is reported; `--whole-copy` also times one);
- offline `status` (no daemon) at 0%, 5%, 50% and 100%;
- live `status` at 5%, 50% and the end: the control client's call the TUI makes each second
  with dispatch paused (latency, the daemon's CPU per call, the snapshot's size) and while the
  daemon dispatches flat out (median and p90), and the CLI (a fresh Python process);
- the TUI at 1 Hz in tmux (% of a core), with dispatch paused and while it dispatches;
- `verify --state` and `rebuild-state` at 100%: time and peak RSS;
- daemon anonymous RSS at the start and end of each slice, CPU per answer (`--coalesced`
  adds a slice with coalesced streams for the CPU per streamed chunk).

    python benchmarks/bench_seed_scale.py [--prompts 900000] [--answer-bytes 11500]
        [--slice 3000] [--baseline 3000] [--work DIR] [--keep] [--results FILE]
        [--no-tui] [--whole-copy] [--coalesced]
    # ~45 GB of disk at full scale (refused with one line when there is less); DIR is
    # removed after unless --keep
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from harness import ROOT, SHARED_DATA, spawn  # noqa: E402

DATA = SHARED_DATA
SHARD = 500
BATCH = 2_000
INTERVAL_ANSWERS = 9_000          # 15 minutes at 10 answers/s


def turns() -> list[str]:
    out: list[str] = []
    for name in ("mt_bench_questions.jsonl", "vicuna_bench_questions.jsonl"):
        for raw in (DATA / name).read_text(encoding="utf-8").splitlines():
            if raw.strip():
                out += [t for t in json.loads(raw)["turns"] if t]
    if not out:
        raise SystemExit(f"no questions in {DATA}")
    return out


def write_prompts(path: Path, n: int, pool: list[str]) -> None:
    rng = random.Random(33)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            a, b = rng.choice(pool), rng.choice(pool)
            shape = i % 4
            text = (a if shape == 0 else f"{a}\n\n{b}" if shape == 1
                    else f"Request {i}: {a}" if shape == 2 else f"{a} (variant {i % 997})")
            f.write(json.dumps({"id": f"seed-{i:07d}",
                                "messages": [{"role": "user", "content": text}]}) + "\n")


def answer_texts(pool: list[str], size: int, k: int = 64) -> list[tuple[str, str]]:
    """k (reasoning, content) pairs of real sentences, ~70% of `size` thinking."""
    rng = random.Random(7)
    pairs = []
    for _ in range(k):
        def text(n: int) -> str:
            parts: list[str] = []
            while sum(map(len, parts)) < n:
                parts.append(rng.choice(pool))
            return " ".join(parts)[:n]
        pairs.append((text(int(size * 0.7)), text(size - int(size * 0.7))))
    return pairs


def config(work: Path, args: argparse.Namespace, stream_step: int = 16,
           state: str = "job.db") -> dict[str, Any]:
    return {
        "job": {"prompts": str(work / "prompts.jsonl"), "state": state,
                "output": "out", "shard_size": SHARD, "model": "sim"},
        "generation": {"max_tokens": 4096, "enable_thinking": True},
        "servers": {"count": 2, "base_port": 30000, "model_path": "sim/seed",
                    "command": [sys.executable, "-m", "supervisor.sim"],
                    "startup_timeout_s": 60.0, "health_interval_s": 0.5,
                    "flags": {"max-running-requests": 32, "sim-instant": True, "reasoning-parser": "qwen3",
                              "sim-stream-step": stream_step, "context-length": 8192}},
        "quality": {"metrics_window_s": 10.0},
        "control": {"socket": str(work / "control.sock"), "interval_s": 1.0},
        "backup": {"enabled": False},
    }


def cfg_obj(work: Path, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from supervisor.config import parse_config
    return parse_config(config(work, args), base_dir=work)


def child_import(work: str) -> None:
    """In a fresh process: the daemon's import step; prints seconds and peak RSS."""
    from state.store import Store
    from supervisor.job.store_setup import import_prompts
    cfg = cfg_obj(Path(work), argparse.Namespace())
    t0 = time.perf_counter()
    store = Store.open(Path(work) / "job.db")
    import_prompts(store, cfg)
    store.close()
    print(json.dumps({"s": time.perf_counter() - t0,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def timed(cmd: list[str], cwd: Path) -> dict[str, Any]:
    """Wall seconds and peak RSS of a command, through a wrapper that reads its own children."""
    wrapper = ("import resource, subprocess, sys, time, json; t = time.perf_counter(); "
               "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(json.dumps({'s': time.perf_counter() - t, 'rc': p.returncode, "
               "'rss_mb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, "
               "'out': (p.stdout + p.stderr)[-400:]}))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True,
                         cwd=cwd, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def fill(work: Path, upto: int, pairs: list[tuple[str, str]]) -> float:
    """Answers recorded in bulk through the store until `upto` are done; shards written by the
    daemon's writer and marked uploaded. Returns seconds."""
    from state.records import Completion, Done
    from state.store import Store
    from supervisor.shards.keys import shard_key_for
    from supervisor.shards.writer import ShardWriter
    t0 = time.perf_counter()
    store = Store.open(work / "job.db")
    writer = ShardWriter(store, work / "out", SHARD, shard_key_for(None))
    try:
        i = store.counts().done
        while (done := store.counts().done) < upto:
            now = time.time()
            claimed = store.claim(min(BATCH, upto - done), "bulk", now)
            if not claimed:
                break
            outs = []
            for c in claimed:
                reasoning, content = pairs[i % len(pairs)]
                i += 1
                # ~5 bytes a token; every 6th answer cut off at the limit (the seed's 18%).
                cut = i % 6 == 0
                outs.append(Done(c.id, Completion(f"{i} {content}", f"{i} {reasoning}",
                                                  "length" if cut else "stop", 60,
                                                  4096 if cut else 2300, 1600),
                                 4096, "sim", "bulk", now - 60, now))
            store.record(outs)
            writer.sync()
            for shard in store.shards_to_upload():
                store.mark_shard_uploaded(shard.id, None, None, time.time())
    finally:
        store.close()
    return time.perf_counter() - t0


def anon_rss_mb(pid: int) -> float:
    for raw in Path(f"/proc/{pid}/status").read_text().splitlines():
        if raw.startswith("RssAnon:"):
            return int(raw.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    import psutil
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def tui_cpu(sock: str, windows: int = 2, window_s: float = 8.0) -> float:
    """dflash-tui attached in a real terminal (tmux, 100x30), snapshots every second: the
    median of its CPU over `windows` windows, % of one core (bench_tui.py's method)."""
    import bench_tui as bt
    bt.tmux("new-session", "-d", "-s", bt.SESSION, "-x", "100", "-y", "30",
            f"cd {ROOT} && {sys.executable} -m tui --socket {sock}")
    try:
        bt.wait_for(lambda s: "● live" in s, timeout_s=60)
        time.sleep(2.0)
        return statistics.median(bt.cpu_percent(bt.app_process(), windows, window_s))
    finally:
        subprocess.run(["tmux", "kill-session", "-t", bt.SESSION], capture_output=True)


def daemon_slice(work: Path, args: argparse.Namespace, answers: int,
                 stream_step: int) -> dict[str, Any]:
    """The real daemon on fast simulated servers until `answers` more are done (or the job
    ends); its RSS, CPU, and the status calls' cost meanwhile."""
    from supervisor.client.control_client import ControlClient, ControlUnreachable
    from supervisor.demo.free_ports import free_base_port
    data = config(work, args, stream_step)
    data["servers"]["base_port"] = free_base_port(2)
    proc = spawn(work, data)
    sock = data["control"]["socket"]
    r: dict[str, Any] = {}
    try:
        with ControlClient(sock, timeout_s=30.0) as client:
            deadline = time.monotonic() + 300
            while True:
                try:
                    st = client.status()
                    if all(s.state.value == "READY" for s in st.servers):
                        break
                except ControlUnreachable:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"daemon did not start: "
                                     f"{(work / 'daemon.log').read_text()[-2000:]}")
                time.sleep(0.2)
            # The status call alone, dispatch paused (on two shared cores a busy daemon's
            # queueing would be all one measured): what the TUI's 1 Hz refresh costs.
            client.pause("bench: status cost")
            time.sleep(2.0)
            c0, lat2 = cpu_s(proc.pid), []
            t_idle = time.monotonic()
            for _ in range(20):
                a = time.perf_counter()
                raw = client.status()
                lat2.append(time.perf_counter() - a)
            idle_s = time.monotonic() - t_idle
            # The daemon's own background CPU (hub, watchdogs) over the same span is in
            # this figure too; small next to a status build at 900K if that grows.
            r["status_call_ms"] = 1000 * statistics.median(lat2)
            r["daemon_cpu_ms_per_status"] = 1000 * (cpu_s(proc.pid) - c0) / 20
            r["status_span_s"] = idle_s
            from supervisor.contract.codec import dumps
            r["snapshot_bytes"] = len(dumps(raw).encode())
            r["status_cli_live_s"] = timed([sys.executable, "-m", "supervisor", "status",
                                            "--socket", sock], work)["s"]
            if args.tui:
                r["tui_cpu_pct"] = tui_cpu(sock)
            busy_tui: dict[str, float] = {}
            tui_thread = None
            if args.tui:
                # The TUI again while the daemon dispatches flat out: what it costs to watch
                # a busy 900K job (its figures change every second).
                import threading
                tui_thread = threading.Thread(
                    target=lambda: busy_tui.update(pct=tui_cpu(sock, windows=2, window_s=6.0)),
                    daemon=True)
            client.resume()
            if tui_thread is not None:
                tui_thread.start()
            st = client.status()
            start_done, start_cpu, t0 = st.job.done, cpu_s(proc.pid), time.monotonic()
            r["rss_start_mb"] = anon_rss_mb(proc.pid)
            target = min(st.job.total, start_done + answers)
            r["target_is_end"] = target == st.job.total
            lat = []
            end_cpu = start_cpu
            while proc.poll() is None and time.monotonic() - t0 < 900:
                a = time.perf_counter()
                try:
                    st = client.status()
                    end_cpu = cpu_s(proc.pid)
                    r["rss_end_mb"] = anon_rss_mb(proc.pid)
                except ControlUnreachable as exc:
                    r["unreachable"] = str(exc)[:200]     # the job's end, or a busy socket
                    time.sleep(0.5)
                    continue
                except Exception:                       # psutil's NoSuchProcess at the end
                    if proc.poll() is None:
                        raise
                    break
                lat.append(time.perf_counter() - a)
                if st.job.done >= target:
                    r["ended"] = f"done {st.job.done} >= {target}"
                    break
                time.sleep(0.5)
            elapsed = time.monotonic() - t0
            answered = st.job.done - start_done
            if tui_thread is not None:
                tui_thread.join(timeout=60)
                r["tui_cpu_busy_pct"] = busy_tui.get("pct")
            from harness import read_db
            # The simulated servers' answers (the bulk ones are server 'bulk'): streamed
            # chunks are about one per stream_step tokens, plus the two that open each part.
            n, tokens = read_db(work / "job.db", "SELECT count(*), coalesce(sum("
                                "completion_tokens), 0) FROM prompts WHERE status = 'done' "
                                "AND server <> 'bulk'")[0]
            r["sim_answers_total"], r["sim_tokens_per_answer"] = n, tokens / max(1, n)
            r.update(answered=answered, elapsed_s=elapsed,
                     cpu_ms_per_answer=1000 * (end_cpu - start_cpu) / max(1, answered),
                     busy_status_ms_median=1000 * statistics.median(lat) if lat else None,
                     busy_status_ms_p90=(1000 * sorted(lat)[int(0.9 * len(lat))]
                                         if lat else None))
    finally:
        if proc.poll() is None and r.get("target_is_end"):
            try:                 # the job's last answers: let it finish, shard and exit
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            import signal
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    r["exit"] = proc.returncode
    return r


def whole_copy_backup(db: Path, dest: Path) -> float:
    """The backup as it was before chunks, step for step: an online copy, its quick_check,
    MD5 and SHA-256 of the whole (mapped, not read into memory), one put of the whole copy
    through the same sink (read back), the uploaded shards read from the copy. Seconds."""
    import hashlib
    import mmap
    from state.db_copy import copy_live, inspect
    from supervisor.state_backup.backup import uploaded_shards
    from supervisor.uploads.local_sink import LocalDirSink
    from supervisor.uploads.sink import ShardBlob
    t0 = time.perf_counter()
    copy = db.with_name("whole.backup")
    copy_live(db, copy)
    inspect(copy)
    with open(copy, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        blob = ShardBlob("_state/job-000000000000001.db", mm,  # type: ignore[arg-type]
                         hashlib.md5(mm).hexdigest(), hashlib.sha256(mm).hexdigest())
        LocalDirSink(dest, db.parent).put(blob)
    finally:
        mm.close()
    uploaded_shards(copy)
    copy.unlink()
    return time.perf_counter() - t0


def backup_interval(work: Path, pairs: list[tuple[str, str]], upto: int,
                    whole_copy: bool) -> dict[str, Any]:
    """One backup, INTERVAL_ANSWERS more answers, another backup: what the second costs, and
    (with `whole_copy`) the time of a whole copy, the design before chunks, at the same
    point; its bytes are the DB's size either way."""
    from supervisor.state_backup.backup import StateBackup
    from supervisor.state_backup.restore import NodeIdentity
    from supervisor.uploads.local_sink import LocalDirSink
    from supervisor.uploads.output_reader import DirectoryReader
    dest = work / "backup-out"
    db = work / "job.db"
    me = NodeIdentity(None, "0" * 64, "prompts.jsonl")
    backup = StateBackup(db, LocalDirSink(dest, db.parent), DirectoryReader(dest), me, 0)
    t0 = time.perf_counter()
    backup.backup_sync()
    first_s = time.perf_counter() - t0
    fill(work, upto, pairs)
    t0 = time.perf_counter()
    m = backup.backup_sync()
    after_s = time.perf_counter() - t0
    assert backup.last_sent is not None
    shutil.rmtree(dest)          # disk: at 900K each of these is ~11 GB
    whole_s = None
    if whole_copy:
        whole_s = whole_copy_backup(db, dest)
        shutil.rmtree(dest)
    return {"db_bytes": m.db_bytes, "chunks": len(m.chunks), "first_backup_s": first_s,
            "after_sent_bytes": backup.last_sent.bytes, "after_sent_chunks": backup.last_sent.chunks,
            "after_s": after_s, "before_sent_bytes": m.db_bytes, "before_s": whole_s}


# Disk a prompt takes at the peak (the end's backup interval): its answer in the DB (~12.2 KB)
# and in a shard (~12 KB), the backup's chunks of the DB and the online copy they come from.
DISK_PER_PROMPT = 50_000


def baseline(work: Path, args: argparse.Namespace, pool: list[str],
             pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """The same live and offline figures on a 3K-prompt job at 50%: what the 900K figures
    are held against (issue: no more than at 3K)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "out").mkdir(exist_ok=True)
    write_prompts(work / "prompts.jsonl", args.baseline, pool)
    proc = subprocess.run([sys.executable, __file__, "--child-import", str(work)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"import failed: {proc.stderr[-2000:]}")
    fill(work, args.baseline // 2, pairs)
    offline = timed([sys.executable, "-m", "supervisor", "status", "--state", "job.db"], work)
    live = daemon_slice(work, args, args.baseline // 4, 16)
    return {"status_offline_s": offline["s"], **live}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=900_000)
    p.add_argument("--answer-bytes", type=int, default=11_500)
    p.add_argument("--slice", type=int, default=3_000, help="answers per daemon slice")
    p.add_argument("--baseline", type=int, default=3_000,
                   help="prompts of the small job the live figures are held against (0: none)")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--keep", action="store_true", help="leave the work directory")
    p.add_argument("--results", type=Path, default=None,
                   help="also write every stage's figures to this JSON file")
    p.add_argument("--no-tui", dest="tui", action="store_false",
                   help="leave out the TUI's CPU (needs tmux)")
    p.add_argument("--whole-copy", action="store_true",
                   help="also time a whole-DB backup (the design before chunks) at each interval")
    p.add_argument("--coalesced", action="store_true",
                   help="also a slice with coalesced streams at 5%% (CPU per streamed chunk)")
    p.add_argument("--child-import", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child_import:
        child_import(args.child_import)
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="seed-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    need, free = args.prompts * DISK_PER_PROMPT, shutil.disk_usage(work).free
    if free < need:
        raise SystemExit(f"bench_seed_scale: {args.prompts} prompts need ~{need / 1e9:.0f} GB "
                         f"free in {work}, it has {free / 1e9:.0f} GB (--work elsewhere or "
                         f"fewer --prompts)")
    (work / "out").mkdir(exist_ok=True)
    results: dict[str, Any] = {"prompts": args.prompts, "answer_bytes": args.answer_bytes,
                               "load_start": os.getloadavg()}
    started = time.monotonic()

    def emit(stage: str, figures: dict[str, Any]) -> None:
        figures = {**figures, "at_s": round(time.monotonic() - started, 1),
                   "load": round(os.getloadavg()[0], 1)}
        results[stage] = figures
        print(json.dumps({"stage": stage, **figures}), flush=True)

    def offline(stage: str) -> None:
        emit(stage, timed([sys.executable, "-m", "supervisor", "status", "--state", "job.db"],
                          work))

    try:
        pool = turns()
        pairs = answer_texts(pool, args.answer_bytes)
        if args.baseline:
            emit("baseline_3k", baseline(work / "baseline", args, pool, pairs))
            shutil.rmtree(work / "baseline", ignore_errors=True)
        write_prompts(work / "prompts.jsonl", args.prompts, pool)
        proc = subprocess.run([sys.executable, __file__, "--child-import", str(work)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"import failed: {proc.stderr[-2000:]}")
        imp = json.loads(proc.stdout.strip().splitlines()[-1])
        db_prompts = (work / "job.db").stat().st_size
        emit("import", {**imp, "db_bytes": db_prompts, "bytes_per_prompt": db_prompts / args.prompts})
        offline("status_offline_0")
        n = args.prompts
        for label, frac in (("5%", 0.05), ("50%", 0.50)):
            upto = int(n * frac)
            s = fill(work, upto - INTERVAL_ANSWERS, pairs)
            emit(f"backup_{label}", backup_interval(work, pairs, upto, args.whole_copy))
            size = (work / "job.db").stat().st_size
            emit(f"fill_{label}", {"s": s, "db_bytes": size,
                                   "bytes_per_answer": (size - db_prompts) / upto})
            offline(f"status_offline_{label}")
            emit(f"daemon_{label}", daemon_slice(work, args, args.slice, 16))
            if label == "5%" and args.coalesced:
                emit("daemon_5%_coalesced", daemon_slice(work, args, args.slice, 0))
        upto = n - args.slice
        s = fill(work, upto - INTERVAL_ANSWERS, pairs)
        emit("backup_end", {**backup_interval(work, pairs, upto, args.whole_copy), "fill_s": s})
        emit("daemon_end", daemon_slice(work, args, args.slice + 100, 16))
        size = (work / "job.db").stat().st_size
        emit("db_end", {"db_bytes": size, "bytes_per_answer": (size - db_prompts) / n,
                        "output_bytes": sum(f.stat().st_size for f in (work / "out").rglob("*")
                                            if f.is_file())})
        offline("status_offline_end")
        emit("verify", timed([sys.executable, "-m", "supervisor", "verify", "--state", "job.db"],
                             work))
        (work / "rebuild.toml").write_text(
            (work / "job.toml").read_text().replace('"state" = "job.db"',
                                                    '"state" = "rebuilt.db"'))
        emit("rebuild_state", timed([sys.executable, "-m", "supervisor", "rebuild-state",
                                     "--config", "rebuild.toml"], work))
        results["wall_s"] = time.monotonic() - started
        print(json.dumps({"stage": "done", "wall_s": results["wall_s"]}), flush=True)
    finally:
        if args.results is not None:
            args.results.write_text(json.dumps(results, indent=1))
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
