"""Seed scale's job and its shortcut (bench_seed_scale.py says why it is faithful): prompts
from real chat questions, answers of real sentences, and the bulk fill that records them
through the daemon's own store and shard writer; `timed` runs a CLI step in a fresh process."""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import ROOT, SHARED_DATA

if TYPE_CHECKING:
    from supervisor.config import JobConfig

DATA = SHARED_DATA
SHARD = 500
BATCH = 2_000


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


def cfg_obj(work: Path, args: argparse.Namespace) -> JobConfig:
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
