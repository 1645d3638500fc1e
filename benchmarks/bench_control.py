"""Control socket cost: dispatch throughput with 0 vs N clients on the socket, and status
latency under that load.

The daemon (`supervisor run`, a child process) runs a whole job on instant simulated servers,
so dispatch is as fast as this machine allows and any time the control server takes from
the event loop shows. In the loaded runs a second process holds N clients, each streaming
/v1/events and polling /v1/status at 10 Hz (fixed rate, the next poll right away when one
ran late). Throughput is completed prompts / (last finish - first start), read from the
job's own state DB. Runs alternate (0, N, 0, N...) so drift on a shared machine hits both;
figures are medians. Target: ratio >= 0.95.

    python benchmarks/bench_control.py [--prompts 6000] [--servers 3] [--clients 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import harness as daemon  # noqa: E402
from benchmarks.harness import read_db  # noqa: E402

POLL_HZ = 10.0


# -- the load: N clients in one process -------------------------------------------------------

async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> int:
    """One keep-alive GET; returns the status code. Minimal on purpose: the load generator
    shares the machine with the daemon, and its own cost should be small."""
    writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    code = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return code


async def _client(socket: str, stop: asyncio.Event, latencies: list[float],
                  lines: list[int]) -> None:
    async def stream() -> None:
        reader, writer = await asyncio.open_unix_connection(socket, limit=1 << 22)
        writer.write(b"GET /v1/events HTTP/1.1\r\nhost: x\r\n\r\n")
        try:
            while not stop.is_set():
                chunk = await reader.read(1 << 16)
                if not chunk:
                    return
                lines[0] += chunk.count(b"\n")
        finally:
            writer.close()

    async def poll() -> None:
        reader, writer = await asyncio.open_unix_connection(socket, limit=1 << 22)
        period = 1.0 / POLL_HZ
        next_at = time.monotonic()
        try:
            while not stop.is_set():
                started = time.perf_counter()
                if await _get(reader, writer, "/v1/status") == 200:
                    latencies.append(time.perf_counter() - started)
                next_at = max(next_at + period, time.monotonic())
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        finally:
            writer.close()

    tasks = [asyncio.create_task(stream()), asyncio.create_task(poll())]
    await stop.wait()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _load(socket: str, clients: int, out: Path) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    latencies: list[float] = []
    lines = [0]
    tasks = [asyncio.create_task(_client(socket, stop, latencies, lines))
             for _ in range(clients)]
    await asyncio.gather(*tasks)
    out.write_text(json.dumps({"latencies": latencies, "stream_lines": lines[0]}))


# -- one run ----------------------------------------------------------------------------------

def run_once(base: Path, prompts: int, servers: int, clients: int) -> dict[str, float]:
    job = Path(tempfile.mkdtemp(dir=base))
    data = daemon.config_dict(job, servers=servers, prompts=prompts)
    data["servers"]["flags"] = {"max-running-requests": 32, "sim-instant": True}
    data["generation"]["max_tokens"] = 64
    data["control"]["interval_s"] = 1.0
    proc = daemon.spawn(job, data)
    sock = str(job / "control.sock")
    load = None
    deadline = time.monotonic() + 60
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"daemon did not start: {(job / 'daemon.log').read_text()[-2000:]}")
        time.sleep(0.01)
    out = job / "load.json"
    if clients:
        load = subprocess.Popen([sys.executable, __file__, "--load", sock, str(clients),
                                 str(out)])
    code = proc.wait(timeout=900)
    if load is not None:
        load.send_signal(signal.SIGTERM)
        load.wait(timeout=60)
    if code != 0:
        raise SystemExit(f"daemon exited {code}: {(job / 'daemon.log').read_text()[-2000:]}")
    (n, first, last), = read_db(job / "job.db", "SELECT count(*), min(started_at), "
                                "max(finished_at) FROM prompts WHERE status = 'done'")
    result = {"rate": n / (last - first), "prompts": n}
    if load is not None:
        got = json.loads(out.read_text())
        lat = sorted(got["latencies"])
        result.update(polls=len(lat), stream_lines=got["stream_lines"],
                      p50_ms=1000 * lat[len(lat) // 2],
                      p99_ms=1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
                      polls_per_s=len(lat) / (last - first))
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=6000)
    p.add_argument("--servers", type=int, default=3)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--load", nargs=3, metavar=("SOCKET", "CLIENTS", "OUT"),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.load:
        asyncio.run(_load(args.load[0], int(args.load[1]), Path(args.load[2])))
        return 0
    bare: list[float] = []
    loaded: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-control-") as tmp:
        for i in range(args.repeats):
            b = run_once(Path(tmp), args.prompts, args.servers, 0)
            bare.append(b["rate"])
            lo = run_once(Path(tmp), args.prompts, args.servers, args.clients)
            loaded.append(lo)
            print(f"run {i + 1}: 0 clients {b['rate']:.0f}/s, {args.clients} clients "
                  f"{lo['rate']:.0f}/s (status p50 {lo['p50_ms']:.1f} ms, p99 "
                  f"{lo['p99_ms']:.1f} ms, {lo['polls_per_s']:.0f} polls/s, "
                  f"{lo['stream_lines']} stream lines)", flush=True)
    base = statistics.median(bare)
    rate = statistics.median(x["rate"] for x in loaded)
    p50 = statistics.median(x["p50_ms"] for x in loaded)
    p99 = statistics.median(x["p99_ms"] for x in loaded)
    print(f"\ndispatch throughput, {args.prompts} prompts on {args.servers} instant servers "
          f"(medians of {args.repeats}):")
    print(f"  0 clients:            {base:8.0f} prompts/s")
    print(f"  {args.clients} clients (events + status at {POLL_HZ:.0f} Hz): {rate:8.0f} prompts/s")
    print(f"  ratio:                {rate / base:8.3f}   (target >= 0.95)")
    print(f"  status latency under load: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
