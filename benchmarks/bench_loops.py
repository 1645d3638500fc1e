"""The loop detector against the simulator's labels, and what skipping loops saves on a
requeue at twice max tokens.

1. Precision and recall of `loop_detector.is_loop` on every truncated answer the simulator
   gives at max_tokens 4096 (`--sim-loop-share` of the long answers loop), for synthetic
   prompts and for the real MT-bench and Vicuna-bench questions (both turns, several sim
   seeds: the loops echo real, multilingual prompt text).
2. Every truncated answer re-run at 8192, as "requeue truncated" does: the GPU tokens the
   flagged ones cost again (saved by skipping them), how many of those truncated again
   anyway, and what skipping loses (flagged answers that would have finished at 8192).

    python benchmarks/bench_loops.py [--prompts 6000] [--loop-share 0.3] [--seeds 10]

The detector's own cost per truncated answer is printed too (median of all calls).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_dispatch import start_sims, stop_sims  # noqa: E402
from benchmarks.harness import CHAT_QUESTIONS  # noqa: E402
from supervisor.dispatch.loop_detector import is_loop  # noqa: E402
from supervisor.sim.looping_text import loop_plan, loop_visible, prompt_words  # noqa: E402
from supervisor.sim.output_plan import natural_length, prompt_digest  # noqa: E402

THINK = {"separate_reasoning": True, "chat_template_kwargs": {"enable_thinking": True}}
CONCURRENCY = 16


@dataclass
class Tally:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    seconds: list[float] = field(default_factory=list)
    flagged: list[list[dict]] = field(default_factory=list)
    truncated: list[list[dict]] = field(default_factory=list)

    def line(self, name: str) -> str:
        p = self.tp / (self.tp + self.fp) if self.tp + self.fp else float("nan")
        r = self.tp / (self.tp + self.fn) if self.tp + self.fn else float("nan")
        return (f"   {name:<28} truncated {self.tp + self.fp + self.fn + self.tn:5d}  looping "
                f"{self.tp + self.fn:4d}  TP {self.tp:4d} FP {self.fp:3d} FN {self.fn:3d}  "
                f"precision {p:.3f}  recall {r:.3f}")


async def _post_all(url: str, rows: list[list[dict]], max_tokens: int) -> list[dict]:
    out: list[dict | None] = [None] * len(rows)
    it = iter(range(len(rows)))
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=120) as client:
        async def worker() -> None:
            for i in it:
                r = await client.post("/v1/chat/completions", json={
                    "model": "bench", "messages": rows[i], "max_tokens": max_tokens, **THINK})
                r.raise_for_status()
                out[i] = r.json()
        async with anyio.create_task_group() as tg:
            for _ in range(CONCURRENCY):
                tg.start_soon(worker)
    return out  # type: ignore[return-value]


def score(rows: list[list[dict]], answers: list[dict], seed: int, share: float,
          tally: Tally) -> None:
    for messages, a in zip(rows, answers):
        choice = a["choices"][0]
        if choice["finish_reason"] != "length":
            continue
        digest = prompt_digest(messages, seed)
        plan = loop_plan(digest, natural_length(digest), share, len(prompt_words(messages)))
        label = loop_visible(plan, a["usage"]["completion_tokens"])
        m = choice["message"]
        t0 = time.perf_counter()
        flagged = is_loop(m["content"], m["reasoning_content"], "length")
        tally.seconds.append(time.perf_counter() - t0)
        tally.tp += label and flagged
        tally.fn += label and not flagged
        tally.fp += flagged and not label
        tally.tn += not (label or flagged)
        tally.truncated.append(messages)
        if flagged:
            tally.flagged.append(messages)


def real_rows() -> list[list[dict]]:
    rows = []
    for line in CHAT_QUESTIONS.read_text(encoding="utf-8").splitlines():
        for turn in json.loads(line)["turns"]:
            rows.append([{"role": "user", "content": turn}])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=6000)
    ap.add_argument("--loop-share", type=float, default=0.3)
    ap.add_argument("--seeds", type=int, default=10, help="sim seeds for the real prompts")
    args = ap.parse_args()
    share = args.loop_share
    print(f"1. detector vs labels at max_tokens 4096 (loop share {share:g} of answers past "
          f"4096 tokens)")
    synthetic = Tally()
    sims = start_sims(1, ["--sim-instant", "--sim-loop-share", str(share)])
    try:
        url = sims[0][1]
        rows = [[{"role": "user", "content": f"Benchmark prompt {i}: explain something."}]
                for i in range(args.prompts)]
        answers = anyio.run(_post_all, url, rows, 4096)
        score(rows, answers, 0, share, synthetic)
        print(synthetic.line(f"synthetic ({args.prompts} prompts)"))
        print("2. requeue of every truncated answer at max_tokens 8192")
        again = anyio.run(_post_all, url, synthetic.flagged, 8192)
        flagged_tokens = sum(a["usage"]["completion_tokens"] for a in again)
        still_cut = sum(a["choices"][0]["finish_reason"] == "length" for a in again)
        every = anyio.run(_post_all, url, synthetic.truncated, 8192)
        all_tokens = sum(a["usage"]["completion_tokens"] for a in every)
        print(f"   requeue all {len(synthetic.truncated)} truncated: {all_tokens / 1e6:.2f}M "
              f"GPU tokens")
        print(f"   the {len(synthetic.flagged)} flagged as loops cost {flagged_tokens / 1e6:.2f}M "
              f"of them ({100 * flagged_tokens / all_tokens:.0f}%): saved by skipping them")
        print(f"   of the flagged, {still_cut} truncated again at 8192; "
              f"{len(again) - still_cut} would have finished (lost by skipping)")
    finally:
        stop_sims(sims)
    real = real_rows()
    if not real:
        print(f"   real prompts: none in {CHAT_QUESTIONS}; skipped")
    else:
        tally = Tally()
        for seed in range(args.seeds):
            sims = start_sims(1, ["--sim-instant", "--sim-loop-share", str(share),
                                  "--sim-seed", str(seed)])
            try:
                answers = anyio.run(_post_all, sims[0][1], real, 4096)
                score(real, answers, seed, share, tally)
            finally:
                stop_sims(sims)
        print(tally.line(f"MT-bench+Vicuna ({len(real)}x{args.seeds} seeds)"))
    ms = statistics.median(synthetic.seconds) * 1e3
    print(f"   detector cost: median {ms:.2f} ms per truncated answer")


if __name__ == "__main__":
    main()
