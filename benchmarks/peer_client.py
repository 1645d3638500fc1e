"""The peer of issue 39 item 9, as a baseline for bench_queue_ahead.py: a bare client that
launches the job's servers and keeps a fixed number of requests in flight at each one.

It reads the daemon's own job config (so the servers' command lines, flags and the request
bodies are the daemon's), launches every server with the command the daemon would use, waits
for each `/health_generate` 200, then keeps `--in-flight` streamed chat completions open per
server (96 = 32 running + a queue of 64 in SGLang, the peer the item describes), pulling the
prompts in file order from one shared queue. Each stream is read to its end, every `data:`
line parsed as JSON (the least a client that keeps the text must do), and the answers written
to a JSONL file as they end. Nothing else: no state DB, no retries, no stall or loop watch,
no shards, no token ids. It stops the servers at the end and prints one JSON line: when the
first request was sent and the last answer read (wall clock), answers and completion tokens.

    python benchmarks/peer_client.py --config job.toml --out answers.jsonl [--in-flight 96]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from supervisor.config.load import load_config  # noqa: E402
from supervisor.servers.launch_command import build_specs  # noqa: E402
from supervisor.sglang.chat_request import CHAT_PATH, request_body  # noqa: E402

HEALTH_TIMEOUT_S = 120.0


async def _healthy(session: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes]
                   ) -> None:
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the server exited with {proc.returncode}")
        try:
            async with session.get(url + "/health_generate") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise SystemExit(f"{url}: not healthy in {HEALTH_TIMEOUT_S:g} s")


async def _stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]
                  ) -> dict[str, Any]:
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    reasoning: list[str] = []
    content: list[str] = []
    out: dict[str, Any] = {}
    async with session.post(url + CHAT_PATH, json=body) as resp:
        if resp.status != 200:
            raise SystemExit(f"{url}: {resp.status}: {(await resp.text())[:500]}")
        rest = b""
        async for chunk in resp.content.iter_any():
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                event = json.loads(line[6:])
                for choice in event.get("choices") or ():
                    delta = choice.get("delta") or {}
                    reasoning.append(delta.get("reasoning_content") or "")
                    content.append(delta.get("content") or "")
                    if choice.get("finish_reason"):
                        out["finish_reason"] = choice["finish_reason"]
                if event.get("usage"):
                    out["usage"] = event["usage"]
    out["reasoning_content"] = "".join(reasoning)
    out["content"] = "".join(content)
    return out


async def run(config_path: Path, out_path: Path, in_flight: int) -> dict[str, Any]:
    cfg = load_config(config_path)
    specs = build_specs(cfg.servers)
    procs = [subprocess.Popen(list(spec.argv), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True) for spec in specs]
    urls = [f"http://{spec.host}:{spec.port}" for spec in specs]
    prompts: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    with open(cfg.job.prompts, encoding="utf-8") as f:
        for raw in f:
            if raw.strip():
                prompts.put_nowait(json.loads(raw))
    figures: dict[str, Any] = {"first_sent": None, "last_sent": 0.0, "last_answer": 0.0,
                               "answers": 0, "completion_tokens": 0}
    connector = aiohttp.TCPConnector(limit=0)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=10)) as session, \
                asyncio.timeout(3600):
            await asyncio.gather(*(_healthy(session, url, p) for url, p in zip(urls, procs)))
            with open(out_path, "w", encoding="utf-8") as out:
                async def worker(url: str) -> None:
                    while not prompts.empty():
                        prompt = prompts.get_nowait()
                        body = request_body(cfg.job.model, prompt["messages"],
                                            cfg.generation, cfg.generation.max_tokens)
                        figures["last_sent"] = time.time()
                        if figures["first_sent"] is None:
                            figures["first_sent"] = figures["last_sent"]
                        answer = await _stream(session, url, body)
                        figures["last_answer"] = time.time()
                        figures["answers"] += 1
                        figures["completion_tokens"] += answer["usage"]["completion_tokens"]
                        out.write(json.dumps({"id": prompt["id"], **answer}) + "\n")

                await asyncio.gather(*(worker(url) for url in urls for _ in range(in_flight)))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, required=True, help="the daemon's job config")
    ap.add_argument("--out", type=Path, required=True, help="where the answers go (JSONL)")
    ap.add_argument("--in-flight", type=int, default=96, help="requests open per server")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args.config, args.out, args.in_flight))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
