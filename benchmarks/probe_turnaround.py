"""A freed slot's turnaround on one server: from a request's last token to the first token
of the request that takes its slot (issue 39 item 9).

Clients in a closed loop, as the daemon's workers are: `--slots` of them keep exactly what
the server runs in flight (the daemon with `dispatch.queue_ahead = 0`), each sending its
next request when its last one ends; `--ahead K` adds K more, which wait in the server's
queue. Every request streams, so its first chunk marks its admission (SGLang and the
simulator send nothing, not even the role chunk, while a request waits in the queue) and
its last its end. The server admits first come first served, so with its slots full the
i-th admission (in order of first chunks) fills the slot the (i - slots)-th end freed:
turnaround = first chunk of the one - end of the other. That is our round trip (the end
read, the next request sent), the server's admission (its next scheduling step) and the
new request's prefill. Slot idle share = turnaround / (decode time + turnaround).

Runs against any server speaking SGLang's chat API: the simulator (`python -m
supervisor.sim ...`) or real SGLang on CPU (/work/shared/tools/sglang-cpu). Every request
asks `ignore_eos`, so each writes exactly its own length (half to all of `--max-tokens`,
fixed by its number). `wall_s`: the first request sent to the last answer.
Run: `python benchmarks/probe_turnaround.py --url http://127.0.0.1:PORT --slots 4 --ahead 0`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass

import anyio
import httpx


@dataclass(frozen=True)
class Timed:
    sent: float
    first: float        # the first SSE chunk: admitted and prefilled
    end: float          # [DONE]


async def one(client: httpx.AsyncClient, url: str, max_tokens: int, n: int) -> Timed:
    # Lengths spread over half to all of max tokens (fixed per n), so slots free one at a
    # time as in a job, not in lockstep.
    tokens = max(1, max_tokens // 2 + (n * 7919) % (max_tokens // 2 + 1))
    body = {"model": "default", "stream": True, "max_tokens": tokens, "ignore_eos": True,
            "messages": [{"role": "user", "content": f"Question {n}: say something long."}]}
    sent = time.monotonic()
    first = None
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            raise SystemExit(f"HTTP {resp.status_code}: {(await resp.aread())[:300]!r}")
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            if first is None:
                first = time.monotonic()
            if line.strip() == "data: [DONE]":
                break
    end = time.monotonic()
    return Timed(sent, first if first is not None else end, end)


async def closed_loop(url: str, clients: int, requests: int, max_tokens: int) -> list[Timed]:
    out: list[Timed] = []
    counter = iter(range(requests))
    async with httpx.AsyncClient(trust_env=False, timeout=600) as client:
        async def worker() -> None:
            for n in counter:          # shared: `requests` in all, bounded
                out.append(await one(client, url, max_tokens, n))
        async with anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(worker)
    return out


@dataclass(frozen=True)
class Turnaround:
    gaps: list[float]
    decode_s: float         # median first chunk to end

    def summary(self) -> dict[str, float]:
        g = sorted(self.gaps)
        med = statistics.median(g)
        return {"turnaround_median_ms": round(med * 1000, 2),
                "turnaround_p90_ms": round(g[int(0.9 * (len(g) - 1))] * 1000, 2),
                "decode_median_s": round(self.decode_s, 4),
                "slot_idle_share": round(med / (self.decode_s + med), 4)}


def turnaround(timed: list[Timed], slots: int) -> Turnaround:
    firsts = sorted(t.first for t in timed)
    ends = sorted(t.end for t in timed)
    # The first `slots` admissions fill empty slots; the last ones are the tail's.
    gaps = [firsts[i] - ends[i - slots] for i in range(slots, len(firsts))]
    return Turnaround(gaps, statistics.median(t.end - t.first for t in timed))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:30000")
    ap.add_argument("--slots", type=int, required=True,
                    help="what the server runs at once (its --max-running-requests)")
    ap.add_argument("--ahead", type=int, default=0, help="requests kept in its queue on top")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    if args.slots < 1 or args.ahead < 0 or args.requests <= args.slots:
        raise SystemExit("need --slots >= 1, --ahead >= 0 and --requests above --slots")
    timed = anyio.run(closed_loop, args.url.rstrip("/"), args.slots + args.ahead,
                      args.requests, args.max_tokens)
    wall = max(t.end for t in timed) - min(t.sent for t in timed)
    print(json.dumps({"slots": args.slots, "ahead": args.ahead, "requests": args.requests,
                      "max_tokens": args.max_tokens, "wall_s": round(wall, 3),
                      **turnaround(timed, args.slots).summary()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
