"""The daemon's own CPU per streamed chunk and per answer, at a chunk per token.

SGLang's default `--stream-interval` is 1: a delta per decode step. A node of 8 GPUs x 256
slots x ~50 tok/s then sends ~100,000 chunks a second, and every one goes through the
daemon's single event loop (read, line split, JSON, the stream's bookkeeping, the stall
clock, the loop watch). This measures what one chunk costs it:

- **daemon**: the real `python -m supervisor run` on two fast simulated servers
  (`--sim-instant`, `--stream-interval 1`: a delta per word, thinking on and split by the
  reasoning parser), its own CPU time (utime + stime of /proc/<pid>/stat: every thread of
  the daemon, none of its servers) over a window of steady dispatch, divided by the
  streamed chunks of the answers recorded in that window (each answer's chunks counted from
  its stored text: one per word, and the role, finish and usage chunks).
- **bare**: the baseline, measured in the same round on simulated servers of the same flags:
  a process that streams the same request bodies at the same concurrency with aiohttp (the
  daemon's own client, one per worker) and does nothing but read the chunks and split the
  lines; **bare+json** also parses each chunk's JSON. Its own CPU from /proc/self/stat.

Rounds alternate (bare, daemon, bare, daemon...) so drift on a shared machine hits both;
figures are medians over rounds, ratios paired within a round.

    python benchmarks/bench_stream_cpu.py [--rounds 3] [--prompts 1500] [--max-tokens 512]

About 3 minutes a round (both modes; 1.5 with one) on this 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from harness import config_dict, read_db, spawn  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
SLOTS = 32                   # max running requests per simulated server
CHUNKS_PER_ANSWER_EXTRA = 3  # the role chunk, the finish chunk, the usage chunk


def proc_cpu_s(pid: int | str = "self") -> float:
    """utime + stime of one process (all its threads, not its children), /proc/<pid>/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def sim_flags(max_tokens: int, paced: float | None) -> dict[str, Any]:
    """`paced`: each stream decodes at this many tokens a second (a chunk a read, as a real
    node's streams arrive); None: answers at once (the reader lags, reads coalesce)."""
    speed: dict[str, Any] = {"sim-instant": True} if paced is None else \
        {"sim-tokens-per-s": paced}
    return {"max-running-requests": SLOTS, **speed, "stream-interval": 1,
            "reasoning-parser": "qwen3", "context-length": max(4096, 2 * max_tokens)}


def chunks_of(content: str | None, reasoning: str | None) -> int:
    """The chunks the simulator streamed for one answer at a delta per word
    (supervisor/sim/chat_stream.py: one send per word; a send is one chunk)."""
    words = (len(reasoning.split(" ")) if reasoning else 0) + \
        (len(content.split(" ")) if content else 0)
    return words + CHUNKS_PER_ANSWER_EXTRA


# -- the baseline: a bare streaming loop, in a process of its own -------------------------

def bare_child(args: argparse.Namespace) -> None:
    import aiohttp
    import anyio

    from supervisor.config import parse_config
    from supervisor.sglang.chat_request import request_body

    cfg = parse_config({"job": {"model": "sim"},
                        "generation": {"max_tokens": args.max_tokens, "enable_thinking": True},
                        "servers": {"count": 1, "model_path": "m",
                                    "flags": {"reasoning-parser": "qwen3"}}},
                       base_dir=Path("."))
    lines = Path(args.prompts_file).read_text().splitlines()[:args.n]
    bodies = [json.dumps(request_body("sim", json.loads(line)["messages"], cfg.generation,
                                      args.max_tokens, rid=f"bare-{i}-{time.monotonic_ns()}"),
                         ensure_ascii=False).encode() for i, line in enumerate(lines)]
    parse = args.parse_json
    next_i = 0
    chunks = reads = 0
    headers = {"content-type": "application/json"}

    async def worker(url: str) -> None:
        nonlocal next_i, chunks, reads
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         trust_env=False) as client:
            while next_i < len(bodies):
                body = bodies[next_i]
                next_i += 1
                async with client.post(url + "/v1/chat/completions", data=body,
                                       headers=headers) as r:
                    rest = b""
                    async for piece in r.content.iter_any():
                        reads += 1
                        got = (rest + piece).split(b"\n")
                        rest = got.pop()
                        for line in got:
                            if line.startswith(b"data: {"):
                                chunks += 1
                                if parse:
                                    json.loads(line[6:])

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            for url in args.urls.split(","):
                for _ in range(SLOTS):
                    tg.start_soon(worker, url)

    t0, c0 = time.monotonic(), proc_cpu_s()
    anyio.run(run, backend_options={"use_uvloop": args.uvloop})
    print(json.dumps({"answers": len(bodies), "chunks": chunks, "reads": reads,
                      "cpu_s": proc_cpu_s() - c0,
                      "wall_s": time.monotonic() - t0}))


def bare_round(args: argparse.Namespace, prompts_file: Path, parse: bool,
               paced: float | None, n: int) -> dict[str, Any]:
    from supervisor.demo.free_ports import free_port
    from supervisor.sim.launch import kill_group, sim_argv, wait_healthy

    flags: list[str] = []
    for k, v in sim_flags(args.max_tokens, paced).items():
        flags += [f"--{k}"] if v is True else [f"--{k}", str(v)]
    sims = []
    try:
        for _ in range(2):
            port = free_port()
            proc = subprocess.Popen(sim_argv(port, *flags, model_path="sim/bench-model"),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            sims.append(proc)
            wait_healthy(f"http://127.0.0.1:{port}", proc)
            proc.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
        out = subprocess.run(
            [sys.executable, __file__, "--bare-child", "--urls",
             ",".join(p.url for p in sims),  # type: ignore[attr-defined]
             "--prompts-file", str(prompts_file), "--n", str(n),
             "--max-tokens", str(args.max_tokens)] + (["--parse-json"] if parse else []),
            capture_output=True, text=True, timeout=600,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        if out.returncode != 0:
            raise SystemExit(f"bare loop failed: {out.stderr[-2000:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        for proc in sims:
            kill_group(proc)
    r["us_per_chunk"] = 1e6 * r["cpu_s"] / max(1, r["chunks"])
    r["ms_per_answer"] = 1e3 * r["cpu_s"] / max(1, r["answers"])
    return r


# -- the daemon -----------------------------------------------------------------------------

def done_count(db: Path) -> int:
    try:
        return int(read_db(db, "SELECT n FROM status_counts WHERE status = 'done'")[0][0])
    except (sqlite3.Error, IndexError):
        return 0


def daemon_round(args: argparse.Namespace, work: Path, paced: float | None,
                 prompts: int) -> dict[str, Any]:
    data = config_dict(work, prompts=prompts)
    data["servers"]["flags"] = sim_flags(args.max_tokens, paced)
    data["generation"].update(max_tokens=args.max_tokens, enable_thinking=True)
    data["job"]["shard_size"] = 500
    # The default health interval (the harness polls every 0.2 s for quick starts): each
    # poll scrapes SGLang's /metrics too, a cost per second, not per chunk.
    del data["servers"]["health_interval_s"]
    # Answers cut off at max tokens inside the thinking are what this measures with, not a
    # fault: the quality gate must not pause dispatch on them.
    data["quality"].update(max_bad_rate=1.0, max_thinking_truncated_rate=1.0)
    db = work / "job.db"
    proc = spawn(work, data)
    lo, hi = int(prompts * args.window[0]), int(prompts * args.window[1])
    marks: list[tuple[float, float]] = []       # (wall time, daemon CPU s) at lo and hi
    deadline = time.monotonic() + 600
    try:
        while len(marks) < 2:
            if proc.poll() is not None:
                raise SystemExit(f"daemon exited {proc.returncode}: "
                                 f"{(work / 'daemon.log').read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise SystemExit("daemon round did not reach its window within 600 s")
            n = done_count(db)
            if n >= (lo if not marks else hi):
                marks.append((time.time(), proc_cpu_s(proc.pid)))
                continue
            time.sleep(0.05)
        rss_kb = next(int(x.split()[1]) for x in
                      Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                      if x.startswith("RssAnon:"))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    (t_lo, c_lo), (t_hi, c_hi) = marks
    rows = read_db(db, "SELECT content, reasoning_content FROM prompts WHERE status = 'done' "
                   "AND finished_at > ? AND finished_at <= ?", t_lo, t_hi)
    chunks = sum(chunks_of(c, r) for c, r in rows)
    cpu = c_hi - c_lo
    return {"answers": len(rows), "chunks": chunks, "cpu_s": cpu, "wall_s": t_hi - t_lo,
            "us_per_chunk": 1e6 * cpu / max(1, chunks),
            "ms_per_answer": 1e3 * cpu / max(1, len(rows)),
            "chunks_per_answer": chunks / max(1, len(rows)), "anon_rss_mb": rss_kb / 1024}


def mode_round(args: argparse.Namespace, work: Path, paced: float | None) -> dict[str, Any]:
    """One round of one mode: the daemon, then the two bare loops on its prompts."""
    waves = 2 * SLOTS     # requests the two servers run at once
    prompts = args.prompts if paced is None else args.paced_waves * waves
    bare_n = args.bare_prompts if paced is None else 2 * waves
    d = daemon_round(args, work, paced, prompts)   # writes the prompts file the bare loops read
    prompts_file = work / "prompts.jsonl"
    got = {"bare": bare_round(args, prompts_file, False, paced, bare_n),
           "bare+json": bare_round(args, prompts_file, True, paced, bare_n), "daemon": d}
    if args.asyncio_loop_too:
        os.environ["DFLASH_UVLOOP"] = "0"        # supervisor/job/event_loop.py
        try:
            got["daemon, asyncio loop"] = daemon_round(args, work.with_name(work.name + "a"),
                                                       paced, prompts)
        finally:
            del os.environ["DFLASH_UVLOOP"]
    return got


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mode", choices=("instant", "paced", "both"), default="both")
    p.add_argument("--prompts", type=int, default=1500,
                   help="the daemon's job per instant round")
    p.add_argument("--bare-prompts", type=int, default=600,
                   help="the bare loop's per instant run")
    p.add_argument("--tokens-per-s", type=float, default=100.0,
                   help="paced: each stream's decode speed")
    p.add_argument("--paced-waves", type=int, default=6,
                   help="paced: the daemon's job, in rounds of every slot busy")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--window", type=float, nargs=2, default=(0.2, 0.8),
                   help="the daemon's measured window, as shares of the job done")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--asyncio-loop-too", action="store_true",
                   help="also the daemon on asyncio's own event loop (DFLASH_UVLOOP=0)")
    # The bare loop's own process (run by this script).
    p.add_argument("--bare-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--urls", help=argparse.SUPPRESS)
    p.add_argument("--prompts-file", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--parse-json", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--uvloop", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.bare_child:
        bare_child(args)
        return 0
    base = args.work or Path(tempfile.mkdtemp(prefix="streamcpu-"))
    load = os.getloadavg()[0]
    modes = {"instant": None, "paced": args.tokens_per_s}
    if args.mode != "both":
        modes = {args.mode: modes[args.mode]}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {} for m in modes}
    for k in range(args.rounds):
        for mode, paced in modes.items():
            got = mode_round(args, base / f"{mode}{k}", paced)
            for name, r in got.items():
                runs[mode].setdefault(name, []).append(r)
            print(json.dumps({"round": k, "mode": mode,
                              **{name: {key: round(v, 2) if isinstance(v, float) else v
                                        for key, v in r.items()} for name, r in got.items()}}),
                  flush=True)
    print(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}; {args.rounds} rounds; "
          f"max_tokens {args.max_tokens}; medians")
    for mode, by_name in runs.items():
        d = by_name["daemon"]
        print(f"{mode}{'' if modes[mode] is None else f' ({modes[mode]:g} tok/s a stream)'}: "
              f"{statistics.median(x['chunks_per_answer'] for x in d):.0f} chunks an answer")
        for name, r in by_name.items():
            print(f"  {name:10s} {statistics.median(x['us_per_chunk'] for x in r):6.1f} us a "
                  f"chunk  {statistics.median(x['ms_per_answer'] for x in r):6.2f} ms an answer")
        for base_name in ("bare", "bare+json"):
            if base_name not in by_name:
                continue
            ratio = statistics.median(a["us_per_chunk"] / b["us_per_chunk"]
                                      for a, b in zip(d, by_name[base_name]))
            print(f"  daemon / {base_name}, per chunk (paired): {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
