"""The streaming loop watcher against labelled output: recall, false positives, how early a
loop is confirmed, and the GPU tokens an abort at confirmation saves.

Labelled set, per simulator seed:
(a) answers streamed by the real simulator process (`python -m supervisor.sim --sim-instant
    --sim-loop-share S --reasoning-parser qwen3`), for synthetic prompts and for every turn of
    the real questions (tests/fixtures/prompts/chat_questions.jsonl and
    ../shared/data/*.jsonl, read at run time), half of them thinking (the loop is then in
    the reasoning stream) and half not (in the answer). The label is the simulator's own plan
    (`looping_text.loop_plan` / `loop_visible` on the prompt's digest: what the simulator
    decided to write), never the watcher. The watcher reads the simulator's deltas as they
    come; on a verdict the stream is closed, as the dispatcher would abort the request.
(b) human-written text that does not loop, streamed in token-sized chunks (1-8 characters):
    each real question (its turns joined), the questions of each file joined into documents
    of ~16 KB, and this repository's own Python sources and Markdown docs (plus any
    --extra-negatives directory, e.g. SGLang's source tree). As thinking or answer, by turns.

Reported per seed and as medians over seeds: recall on the looping answers, false-positive
rate on everything else, median tokens at confirmation, and the GPU tokens saved: the sum
over the confirmed loops of (the tokens today's run decodes, i.e. max_tokens) minus (tokens
at confirmation), as a share of all tokens decoded today. A verdict on a label-negative answer
is a false positive; one on a looping answer before its loop began is counted apart (and not
as caught).

    python benchmarks/bench_loop_watch.py [--prompts 800] [--seeds 5] [--loop-share 0.5]
                                          [--max-tokens 32768] [--extra-negatives DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from supervisor.demo.free_ports import free_port  # noqa: E402
from supervisor.dispatch.stream_loop_watch import StreamLoopWatch  # noqa: E402
from supervisor.sim.filler_text import count_prompt_tokens, filler  # noqa: E402
from supervisor.sim.launch import kill_group, sim_argv, wait_healthy  # noqa: E402
from supervisor.sim.looping_text import LoopPlan, loop_plan, loop_visible, prompt_words  # noqa: E402
from supervisor.sim.output_plan import natural_length, plan_output, prompt_digest  # noqa: E402

QUESTION_FILES = [ROOT / "tests" / "fixtures" / "prompts" / "chat_questions.jsonl",
                  *sorted((ROOT.parent / "shared" / "data").glob("*.jsonl"))]
CONTEXT = 40960
CONCURRENCY = 8
DOC_CHARS = 16384


@dataclass
class Tally:
    positives: int = 0
    caught: int = 0
    negatives: int = 0
    false_pos: list[str] = field(default_factory=list)
    premature: list[str] = field(default_factory=list)   # loops flagged before they began
    confirm_tokens: list[int] = field(default_factory=list)
    decoded_today: int = 0           # tokens every answer decodes without the watcher
    saved: int = 0                   # of those, not decoded with an abort at confirmation
    saved_share: list[float] = field(default_factory=list)  # per caught loop, of its budget
    lost_to_false_pos: int = 0       # tokens of good answers aborted (decoded again later)
    lag: list[int] = field(default_factory=list)      # tokens from loop start to verdict
    missed: list[str] = field(default_factory=list)
    human: int = 0
    human_false_pos: int = 0

    @property
    def recall(self) -> float:
        return self.caught / self.positives if self.positives else float("nan")

    @property
    def fp_rate(self) -> float:
        return len(self.false_pos) / self.negatives if self.negatives else float("nan")


def questions() -> list[tuple[str, list[str]]]:
    """(file name, turns) of every real question; files missing here are skipped."""
    out = []
    for path in QUESTION_FILES:
        if not path.exists():
            print(f"   note: {path} not found; skipped")
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append((path.name, json.loads(line)["turns"]))
    return out


def human_texts(extra: Path | None) -> list[tuple[str, str]]:
    qs = questions()
    texts = [(f"{name} question {i}", "\n\n".join(turns)) for i, (name, turns) in enumerate(qs)]
    doc, n = "", 0
    for _name, turns in qs:
        doc += "\n\n".join(turns) + "\n\n"
        if len(doc) >= DOC_CHARS:
            texts.append((f"questions document {n}", doc))
            doc, n = "", n + 1
    if doc:
        texts.append((f"questions document {n}", doc))
    roots = [ROOT / "supervisor", ROOT / "benchmarks", ROOT / "state"]
    files = [p for r in roots if r.exists() for p in sorted(r.rglob("*.py"))]
    files += sorted(ROOT.glob("*.md")) + sorted((ROOT / "docs").rglob("*.md"))
    if extra is not None:
        files += sorted(p for p in extra.rglob("*") if p.suffix in (".py", ".md"))
    for p in files:
        try:
            texts.append((str(p), p.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    return texts


def start_sim(seed: int, share: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = sim_argv(port, "--sim-instant", "--sim-loop-share", str(share),
                    "--sim-seed", str(seed), "--reasoning-parser", "qwen3",
                    "--context-length", str(CONTEXT), model_path="sim/bench-model")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout_s=60, poll_s=0.1)
    except RuntimeError as exc:
        kill_group(proc)
        raise SystemExit(f"{exc}: {' '.join(argv)}") from None
    return proc, url


@dataclass(frozen=True)
class Request:
    messages: list[dict]
    thinking: bool


def label(req: Request, seed: int, share: float,
          max_tokens: int) -> tuple[bool, int, LoopPlan | None]:
    """(loops, tokens the simulator decodes for it, its loop plan) from the simulator's
    own plan for the prompt."""
    digest = prompt_digest(req.messages, seed)
    natural = natural_length(digest)
    plan = loop_plan(digest, natural, share, len(prompt_words(req.messages)))
    room = CONTEXT - count_prompt_tokens(req.messages)
    out = plan_output(digest, max_tokens=max_tokens, thinking=req.thinking, room=room,
                      looping=plan is not None)
    return loop_visible(plan, out.completion_tokens), out.completion_tokens, plan


async def stream_one(client: httpx.AsyncClient, req: Request, max_tokens: int,
                     tally: Tally) -> tuple[int | None, int]:
    """Streams one answer through a watcher: (tokens at confirmation or None, tokens read)."""
    body = {"model": "bench", "messages": req.messages, "max_tokens": max_tokens,
            "stream": True, "separate_reasoning": True,
            "chat_template_kwargs": {"enable_thinking": req.thinking}}
    watch = StreamLoopWatch()
    words = 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if not chunk["choices"]:
                continue
            delta = chunk["choices"][0]["delta"]
            reasoning, content = delta.get("reasoning_content"), delta.get("content")
            # The simulator writes one word a token.
            words += len((reasoning or "").split()) + len((content or "").split())
            verdict = watch.feed(reasoning, content, generated_tokens=words)
            if verdict is not None:
                return verdict.tokens, words     # leaving the block closes the stream
    return None, words


async def run_sim_set(url: str, reqs: list[Request], seed: int, share: float,
                      max_tokens: int, tally: Tally) -> None:
    it = iter(reqs)
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=300) as client:
        async def worker() -> None:
            for req in it:
                looping, today, plan = label(req, seed, share, max_tokens)
                onset = plan.onset if plan is not None else 0
                confirmed, _ = await stream_one(client, req, max_tokens, tally)
                tally.decoded_today += today
                if looping:
                    tally.positives += 1
                if looping and confirmed is not None and confirmed >= onset:
                    tally.caught += 1
                    tally.confirm_tokens.append(confirmed)
                    tally.saved += today - confirmed
                    tally.saved_share.append((today - confirmed) / today)
                    tally.lag.append(confirmed - onset)
                elif looping:
                    if confirmed is not None:      # flagged before its loop even began
                        tally.premature.append(req.messages[0]["content"][:60])
                    else:
                        tally.missed.append(f"loop from token {onset}, {plan.period} words a "
                                            f"turn, cut at {today}")
                else:
                    tally.negatives += 1
                    if confirmed is not None:
                        tally.false_pos.append(
                            f"sim seed {seed}: {req.messages[0]['content'][:60]!r}")
                        tally.lost_to_false_pos += confirmed
        async with anyio.create_task_group() as tg:
            for _ in range(CONCURRENCY):
                tg.start_soon(worker)


def run_human(texts: list[tuple[str, str]], seed: int, tally: Tally) -> None:
    rng = random.Random(seed)
    for i, (name, text) in enumerate(texts):
        watch = StreamLoopWatch()
        pos, verdict = 0, None
        while pos < len(text) and verdict is None:
            step = rng.randint(1, 8)                     # about one token a chunk
            piece = text[pos:pos + step]
            verdict = watch.feed(piece, None) if i % 2 else watch.feed(None, piece)
            pos += step
        tally.human += 1
        tally.negatives += 1
        if verdict is not None:
            tally.human_false_pos += 1
            tally.false_pos.append(f"human text {name}: {verdict.snippet[:60]!r}")


def watcher_cost(texts: list[tuple[str, str]]) -> float:
    """Microseconds of watcher CPU per 1,000 tokens, fed 4 characters (about a token) a
    chunk: the human texts, then a loop; best of three."""
    text = "".join(t for _, t in texts)[:400_000]
    text += " ".join(f"{k}. we check the sum again and it is still 12." for k in range(2000))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for start in range(0, len(text), 100_000):
            watch = StreamLoopWatch()
            block = text[start:start + 100_000]
            for i in range(0, len(block), 4):
                if watch.feed(None, block[i:i + 4]) is not None:
                    break
        best = min(best, time.perf_counter() - t0)
    return best / (len(text) / 4) * 1e9


def varied_loops(seed: int, change: float, count: int = 100, words: int = 8192) -> float:
    """Recall on loops that vary: the simulator's kind of loop (filler, then a passage of
    4-1200 words again and again) with each word of each copy changed with probability
    `change` (the watcher's word-by-word rule; outside the labelled set)."""
    rng = random.Random(seed)
    caught = 0
    for i in range(count):
        onset = rng.randint(64, 3000)
        period = int(math.exp(rng.uniform(math.log(4), math.log(1200))))
        passage = filler(period, 20011 + 97 * i).split()
        out = filler(onset, 31 * i).split()
        while len(out) < words:
            out += [rng.choice(passage) if rng.random() < change else w for w in passage]
        text = " ".join(out[:words])
        watch = StreamLoopWatch()
        for k in range(0, len(text), 4):
            if watch.feed(text[k:k + 4], None) is not None:
                caught += 1
                break
    return caught / count


def requests(n: int, seed: int) -> list[Request]:
    rows = [[{"role": "user", "content": f"Benchmark prompt {seed}-{i}: explain something."}]
            for i in range(n)]
    rows += [[{"role": "user", "content": turn}] for _, turns in questions() for turn in turns]
    return [Request(m, thinking=i % 2 == 0) for i, m in enumerate(rows)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=800, help="synthetic prompts per seed")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--loop-share", type=float, default=0.5)
    ap.add_argument("--max-tokens", type=int, default=32768)
    ap.add_argument("--extra-negatives", type=Path, default=None,
                    help="a directory of more human-written .py/.md files (e.g. SGLang's)")
    args = ap.parse_args()
    if args.max_tokens + 512 > CONTEXT:
        raise SystemExit(f"--max-tokens must leave room for the prompt in {CONTEXT} tokens")
    texts = human_texts(args.extra_negatives)
    print(f"loop share {args.loop_share:g} of answers past 4096 tokens, max_tokens "
          f"{args.max_tokens}, {args.prompts} synthetic prompts + every real turn per seed, "
          f"{len(texts)} human texts")
    tallies = []
    for seed in range(args.seeds):
        tally = Tally()
        proc, url = start_sim(seed, args.loop_share)
        try:
            anyio.run(run_sim_set, url, requests(args.prompts, seed), seed, args.loop_share,
                      args.max_tokens, tally)
        finally:
            kill_group(proc)
        run_human(texts, seed, tally)
        tallies.append(tally)
        share = tally.saved / tally.decoded_today if tally.decoded_today else float("nan")
        med = statistics.median(tally.confirm_tokens) if tally.confirm_tokens else float("nan")
        print(f"   seed {seed}: loops {tally.positives:4d} caught {tally.caught:4d} "
              f"recall {tally.recall:.4f} | negatives {tally.negatives:5d} (human "
              f"{tally.human}) false pos {len(tally.false_pos)} rate {tally.fp_rate:.5f} | "
              f"median tokens at confirmation {med:.0f} | saved {share:.1%} of "
              f"{tally.decoded_today / 1e6:.1f}M decode tokens")
        for miss in tally.missed[:5]:
            print(f"      missed: {miss}")
        if tally.premature:
            print(f"      {len(tally.premature)} loops flagged before their loop began")
        for fp in tally.false_pos[:5]:
            print(f"      false positive: {fp}")

    def med(values: list[float]) -> float:
        return statistics.median(values)

    def med_of(attr: str) -> float:
        return med([statistics.median(getattr(t, attr)) for t in tallies if getattr(t, attr)])

    print(f"medians over {len(tallies)} seeds: recall {med([t.recall for t in tallies]):.4f}, "
          f"false-positive rate {med([t.fp_rate for t in tallies]):.5f}, tokens at "
          f"confirmation {med_of('confirm_tokens'):.0f} ({med_of('lag'):.0f} after the loop "
          f"began), GPU tokens saved {med([t.saved / t.decoded_today for t in tallies]):.1%} "
          f"of all decode ({med_of('saved_share'):.1%} of each loop's budget), lost to false "
          f"positives "
          f"{med([t.lost_to_false_pos / t.decoded_today for t in tallies]):.3%}")
    print(f"totals: {sum(t.caught for t in tallies)}/{sum(t.positives for t in tallies)} loops "
          f"caught, {sum(len(t.false_pos) for t in tallies)} false positives in "
          f"{sum(t.negatives for t in tallies)} negatives")
    print(f"watcher CPU: {watcher_cost(texts):.0f} us per 1,000 tokens (4-character chunks)")
    print("loops that vary (100 per rate, 8,192 words, not from the simulator): recall "
          + ", ".join(f"{varied_loops(0, c):.2f} with {c:.0%} of words changed a copy"
                      for c in (0.01, 0.05, 0.1)))


if __name__ == "__main__":
    main()
