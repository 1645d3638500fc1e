"""Dispatch throughput, as ratios against baselines measured in the same run.

1. Instant servers: completions/s through the whole path (claim -> HTTP -> record in SQLite
   -> shard files) vs a bare httpx + anyio loop posting the same requests, unstreamed, at the
   same concurrency to the same servers: the daemon unstreamed (dispatch.stream false, target
   >= 0.8x) and streamed, as it runs by default (SSE chunks read, stall clock and loop watch
   on each; target >= 0.9x). Also the daemon's CPU seconds per 1,000 requests (this
   process's user + system time over the run: claim, HTTP, stream reading, recording, shard
   writing; the simulated servers are other processes).
2. Slot-limited servers with a fixed time per token: output tokens/s achieved vs the servers'
   theoretical maximum (every slot decoding all the time), start to last shard written.
   Target >= 97%. The bare loop runs the same load as a reference: what is lost there is
   HTTP and scheduling on this machine, not dispatch.

    python benchmarks/bench_dispatch.py [--prompts 4000] [--servers 2] [--repeats 3]

Runs alternate (baseline, daemon, baseline, daemon...) so drift on a shared machine hits both;
figures are medians.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from state.async_store import AsyncStore  # noqa: E402
from state.records import ImportRow  # noqa: E402
from state.store import Store  # noqa: E402
from supervisor.config import parse_config  # noqa: E402
from supervisor.demo.free_ports import free_port  # noqa: E402
from supervisor.dispatch.dispatcher import Dispatcher  # noqa: E402
from supervisor.servers.endpoint import Endpoint  # noqa: E402
from supervisor.sglang.chat_request import request_body  # noqa: E402
from supervisor.shards.keys import shard_key_for  # noqa: E402
from supervisor.shards.writer import ShardWriter  # noqa: E402
from supervisor.sim.launch import sim_argv, wait_healthy  # noqa: E402


def cpu_s() -> float:
    """This process's CPU time so far (user + system), all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def start_sims(count: int, flags: list[str]) -> list[tuple[subprocess.Popen, str]]:
    sims = []
    for _ in range(count):
        port = free_port()
        # Thinking requests: as on SGLang, only a reasoning parser splits the trace out.
        proc = subprocess.Popen(sim_argv(port, "--reasoning-parser", "qwen3", *flags,
                                         model_path="sim/bench-model"),
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        sims.append((proc, url))
    return sims


def stop_sims(sims: list[tuple[subprocess.Popen, str]]) -> None:
    for proc, _ in sims:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def prompts(n: int) -> list[dict]:
    return [{"role": "user", "content": f"Benchmark prompt number {i}: explain something."}
            for i in range(n)]


def config(tmp: Path, max_tokens: int, slots: int, stream: bool = False):
    return parse_config({
        "job": {"model": "bench"}, "generation": {"max_tokens": max_tokens},
        "servers": {"count": 1, "model_path": "m", "flags": {"reasoning-parser": "qwen3"}},
        "dispatch": {"max_in_flight_per_server": slots, "request_timeout_s": 120.0,
                     "stream": stream},
        # Short answers on purpose (cheap to serve): most are cut off inside the thinking,
        # which the quality gate would rightly pause on; the benchmark measures dispatch.
        "quality": {"max_bad_rate": 1.0, "max_thinking_truncated_rate": 1.0}}, base_dir=tmp)


async def bare_loop(urls: list[str], n: int, slots: int, max_tokens: int,
                    stream: bool = False, lib: str = "httpx") -> tuple[float, int, float]:
    """The baseline: the same request bodies, the same concurrency, no store, no shards.
    Streamed: each SSE line read and its JSON parsed, nothing else (what the servers' own
    streaming costs, apart from the daemon's). Each worker has its own client (one
    keep-alive connection), as the daemon's workers do. `lib`: httpx (the issue's baseline,
    and this project's HTTP client everywhere else) or aiohttp (the client the daemon's
    dispatch path uses, supervisor/dispatch/worker_client.py). (seconds, tokens, CPU s)."""
    cfg = config(Path("."), max_tokens, slots)
    bodies = [json.dumps(request_body("bench", [m], cfg.generation, max_tokens,
                                      rid=f"bare-{i}-{time.monotonic_ns()}" if stream else None)
                         ).encode()
              for i, m in enumerate(prompts(n))]
    next_i = 0
    tokens = 0
    ctx = ssl.create_default_context()
    headers = {"content-type": "application/json"}

    def count(line: bytes) -> None:
        nonlocal tokens
        if line.startswith(b"data: {"):
            data = json.loads(line[6:])
            if data.get("usage") and not data["choices"]:
                tokens += data["usage"]["completion_tokens"]

    async def with_httpx(url: str) -> None:
        nonlocal next_i, tokens
        async with httpx.AsyncClient(trust_env=False, timeout=120, verify=ctx,
                                     limits=httpx.Limits(max_connections=None,
                                                         max_keepalive_connections=1)) as client:
            while next_i < n:
                body = bodies[next_i]
                next_i += 1
                if stream:
                    async with client.stream("POST", url + "/v1/chat/completions",
                                             content=body, headers=headers) as r:
                        async for line in r.aiter_lines():
                            count(line.encode())
                    continue
                r = await client.post(url + "/v1/chat/completions", content=body,
                                      headers=headers)
                tokens += r.json()["usage"]["completion_tokens"]

    async def with_aiohttp(url: str) -> None:
        nonlocal next_i, tokens
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
            while next_i < n:
                body = bodies[next_i]
                next_i += 1
                async with client.post(url + "/v1/chat/completions", data=body,
                                       headers=headers) as r:
                    if stream:
                        rest = b""
                        async for chunk in r.content.iter_any():
                            lines = (rest + chunk).split(b"\n")
                            rest = lines.pop()
                            for line in lines:
                                count(line)
                        continue
                    tokens += json.loads(await r.read())["usage"]["completion_tokens"]

    worker = with_httpx if lib == "httpx" else with_aiohttp
    t0 = time.perf_counter()
    c0 = cpu_s()
    async with anyio.create_task_group() as tg:
        for url in urls:
            for _ in range(slots):
                tg.start_soon(worker, url)
    return time.perf_counter() - t0, tokens, cpu_s() - c0


async def daemon_path(urls: list[str], n: int, slots: int, max_tokens: int,
                      stream: bool = False) -> tuple[float, int, float]:
    """Claim -> HTTP -> record -> shard, as the job runs it; (seconds, tokens, CPU s)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        store = Store.open(tmpd / "job.db")
        store.import_batch([ImportRow(f"b{i:07d}", [m], i + 1) for i, m in enumerate(prompts(n))])
        out = tmpd / "shards"
        out.mkdir()
        writer = ShardWriter(store, out, 500, shard_key_for(None))
        astore = AsyncStore(store)
        d = Dispatcher(astore, config(tmpd, max_tokens, slots, stream))
        try:
            t0 = time.perf_counter()
            c0 = cpu_s()
            async with d.running():
                draining = anyio.Event()
                async with anyio.create_task_group() as tg:
                    for i, url in enumerate(urls):
                        tg.start_soon(d.serve, Endpoint(f"gpu{i}", url, slots), draining)

                    async def shards() -> None:
                        while True:
                            await anyio.sleep(0.5)
                            await anyio.to_thread.run_sync(writer.sync, False)
                    tg.start_soon(shards)
                    # The dispatcher's own count (no store query): polling the store a
                    # hundred times a second would be counted as the daemon's CPU.
                    while d.completed_total() < n:
                        await anyio.sleep(0.01)
                    draining.set()
                    tg.cancel_scope.cancel()
            await anyio.to_thread.run_sync(writer.sync, True)
            elapsed = time.perf_counter() - t0
            cpu = cpu_s() - c0
            lines = sum(len(p.read_text().splitlines()) for p in out.glob("*.jsonl"))
            assert lines == n, f"{lines} shard lines for {n} prompts"
            tokens = sum(json.loads(l)["usage"]["completion_tokens"]
                         for p in out.glob("*.jsonl") for l in p.read_text().splitlines())
            return elapsed, tokens, cpu
        finally:
            store.close()


def instant(args: argparse.Namespace, step: int) -> None:
    """Part 1 on instant servers streaming `step` tokens a delta (0: coalesced)."""
    sims = start_sims(args.servers, ["--sim-instant", "--max-running-requests", str(args.slots),
                                     "--sim-stream-step", str(step)])
    loops = [(lib, stream) for lib in ("httpx", "aiohttp") for stream in (False, True)]
    try:
        urls = [u for _, u in sims]
        for lib in ("httpx", "aiohttp"):
            anyio.run(bare_loop, urls, 200, args.slots, 256, False, lib)   # warm both up
        rate: dict[tuple[str, bool], list[float]] = {k: [] for k in loops}
        bare_cpu: dict[tuple[str, bool], list[float]] = {k: [] for k in loops}
        daemon: dict[bool, list[float]] = {False: [], True: []}
        cpu: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeats):
            for lib, stream in loops:
                t, _, c = anyio.run(bare_loop, urls, args.prompts, args.slots, 256, stream, lib)
                rate[lib, stream].append(args.prompts / t)
                bare_cpu[lib, stream].append(c / args.prompts * 1000)
            for stream in (False, True):
                t, _, c = anyio.run(daemon_path, urls, args.prompts, args.slots, 256, stream)
                daemon[stream].append(args.prompts / t)
                cpu[stream].append(c / args.prompts * 1000)

        def runs(xs: list[float], fmt: str = ".0f") -> str:
            return ", ".join(f"{x:{fmt}}" for x in xs)

        def paired(xs: list[float], base: list[float]) -> str:
            # Each run against the baseline run of the same round: drift on a shared
            # machine hits both sides of a pair alike.
            ps = [x / b for x, b in zip(xs, base)]
            return f"{statistics.median(ps):.2f}x (runs: {runs(ps, '.2f')})"

        base = rate["httpx", False]
        for lib, stream in loops:
            name = f"bare {lib} loop, {'streamed' if stream else 'unstreamed'}"
            print(f"   {name:32s} {statistics.median(rate[lib, stream]):6.0f}/s  "
                  f"(runs: {runs(rate[lib, stream])})  {paired(rate[lib, stream], base)}; "
                  f"CPU {statistics.median(bare_cpu[lib, stream]):.2f} s per 1,000")
        for stream, target in ((False, 0.8), (True, 0.9)):
            name = f"daemon, {'streamed' if stream else 'unstreamed'}"
            print(f"   {name:32s} {statistics.median(daemon[stream]):6.0f}/s  "
                  f"(runs: {runs(daemon[stream])})  CPU {statistics.median(cpu[stream]):.2f} s "
                  f"per 1,000 (runs: {runs(cpu[stream], '.2f')})")
            print(f"      vs bare httpx unstreamed   {paired(daemon[stream], base)}; "
                  f"target >= {target}")
            print(f"      vs bare aiohttp, same shape "
                  f"{paired(daemon[stream], rate['aiohttp', stream])}")
    finally:
        stop_sims(sims)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=4000)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timed-prompts", type=int, default=1280)
    ap.add_argument("--tokens-per-s", type=float, default=200.0)
    ap.add_argument("--timed-max-tokens", type=int, default=256)
    ap.add_argument("--only-instant", action="store_true", help="part 1 only")
    ap.add_argument("--only-paced", action="store_true", help="part 2 only")
    ap.add_argument("--stream-step", type=int, default=16,
                    help="part 2: tokens per streamed delta (1: SGLang's default stream "
                         "interval, a chunk per token)")
    args = ap.parse_args()

    if not args.only_paced:
        print(f"1. instant servers: {args.servers} x {args.slots} slots, {args.prompts} "
              f"prompts, max_tokens 256")
        print("   a. streams coalesced (one delta for the trace, one for the answer: SGLang's "
              "stream to a reader behind the decode)")
        instant(args, 0)
        print("   b. a delta per 16 tokens (SGLang's stream to a reader that keeps up: ~20 "
              "chunks a request, the per-chunk cost)")
        instant(args, 16)

    if args.only_instant:
        return
    tps, mt = args.tokens_per_s, args.timed_max_tokens
    print(f"2. slot-limited servers: {args.servers} x {args.slots} slots at {tps:g} tok/s per "
          f"request, max_tokens {mt}, {args.timed_prompts} prompts")
    sims = start_sims(args.servers, ["--max-running-requests", str(args.slots),
                                     "--sim-tokens-per-s", str(tps),
                                     "--sim-stream-step", str(args.stream_step)])
    try:
        urls = [u for _, u in sims]
        theoretical = args.servers * args.slots * tps
        ratios, bare_ratios, cpus, cores = [], [], [], []
        for _ in range(args.repeats):
            t, tokens, _ = anyio.run(bare_loop, urls, args.timed_prompts, args.slots, mt)
            bare_ratios.append(tokens / t / theoretical)
            t, tokens, c = anyio.run(daemon_path, urls, args.timed_prompts, args.slots, mt,
                                     True)
            ratios.append(tokens / t / theoretical)
            cpus.append(c / args.timed_prompts * 1000)
            cores.append(c / t)
        print(f"   theoretical max   {theoretical:8.0f} tok/s")
        print(f"   bare httpx loop   {statistics.median(bare_ratios) * 100:7.1f}% of it  (runs: "
              f"{', '.join(f'{r * 100:.1f}%' for r in bare_ratios)})")
        print(f"   daemon full path  {statistics.median(ratios) * 100:7.1f}% of it  (runs: "
              f"{', '.join(f'{r * 100:.1f}%' for r in ratios)}; target >= 97%)")
        print(f"      CPU per 1,000 requests {statistics.median(cpus):6.2f} s  (runs: "
              f"{', '.join(f'{c:.2f}' for c in cpus)}; streamed, a delta per "
              f"{args.stream_step} tokens); {100 * statistics.median(cores):.0f}% of a core")
    finally:
        stop_sims(sims)


if __name__ == "__main__":
    main()
