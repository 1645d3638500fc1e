"""The state DB's cost of keeping exact token ids (job.keep_token_ids), measured on a few
thousand answers and extrapolated to the seed job's 900,000.

The same job is recorded three times through the product's own Store (claim, then Done with
or without TokenIds, in group commits of 500), on a fresh DB each: ids kept for none, for the
truncated answers only (the default), for all. The seed's shape: prompts of --prompt-tokens,
--truncated of the answers cut off at --max-tokens, the others uniformly 300..max-1 tokens
long, the text about --bytes-per-token bytes a token (content and reasoning split 1:3).
Each DB is checkpointed and its file measured; the extra bytes over "none" per answer are
scaled to --scale answers (linear: the ids table is one row per answer, its index one entry).
Measured, then extrapolated: say so wherever the 900K figure is quoted.

    .venv/bin/python benchmarks/bench_token_ids_db.py [--prompts 5000] [--scale 900000]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from state.records import Completion, Done, ImportRow, TokenIds  # noqa: E402
from state.store import Store  # noqa: E402


def _answers(n: int, args: argparse.Namespace) -> list[tuple[int, bool]]:
    """(completion tokens, truncated) for each prompt, the same for every mode."""
    rng = random.Random(7)
    out = []
    for _ in range(n):
        cut = rng.random() < args.truncated
        out.append((args.max_tokens if cut else rng.randrange(300, args.max_tokens), cut))
    return out


def build(path: Path, mode: str, answers: list[tuple[int, bool]],
          args: argparse.Namespace) -> int:
    rng = random.Random(11)
    with Store.open(path) as store:
        store.import_batch([ImportRow(f"p{i:07d}", [{"role": "user", "content": "q" * 800}], i)
                            for i in range(len(answers))])
        prompt_ids = tuple(rng.randrange(150_000) for _ in range(args.prompt_tokens))
        for start in range(0, len(answers), 500):
            claimed = store.claim(500, "gpu0", 1.0 + start)
            outcomes = []
            for p in claimed:
                tokens, cut = answers[int(p.id[1:])]
                chars = tokens * args.bytes_per_token
                keep = mode == "all" or (mode == "truncated" and cut)
                ids = TokenIds(prompt_ids, tuple(rng.randrange(150_000) for _ in range(tokens)),
                               in_reasoning=cut) if keep else None
                outcomes.append(Done(
                    id=p.id, completion=Completion(
                        content="a" * (chars // 4), reasoning_content="r" * (chars - chars // 4),
                        finish_reason="length" if cut else "stop",
                        prompt_tokens=args.prompt_tokens, completion_tokens=tokens,
                        reasoning_tokens=tokens * 3 // 4),
                    max_tokens=args.max_tokens, model="m", server="gpu0", started_at=1.0,
                    finished_at=2.0, tokens=ids))
            store.record(outcomes)
    # Closed: checkpointed into the main file, as the daemon leaves it on a clean stop.
    return path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=5000)
    ap.add_argument("--scale", type=int, default=900_000)
    ap.add_argument("--truncated", type=float, default=0.18)
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--prompt-tokens", type=int, default=200)
    ap.add_argument("--bytes-per-token", type=int, default=4)
    ap.add_argument("--dir", help="where the DBs go (a temporary directory by default)")
    args = ap.parse_args()
    answers = _answers(args.prompts, args)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        sizes = {m: build(Path(tmp) / f"{m}.db", m, answers, args)
                 for m in ("none", "truncated", "all")}
    n = args.prompts
    cut = sum(1 for _, c in answers if c)
    print(f"{n:,} answers, {cut:,} truncated at {args.max_tokens}, prompts of "
          f"{args.prompt_tokens} tokens (measured), scaled to {args.scale:,} (extrapolated)")
    print(f"{'keep_token_ids':<16}{'DB bytes':>16}{'extra':>16}{'extra/answer':>14}"
          f"{'extra at scale':>18}{'DB at scale':>16}")
    for mode, size in sizes.items():
        extra = size - sizes["none"]
        per = extra / n
        print(f"{mode:<16}{size:>16,}{extra:>16,}{per:>14,.0f}"
              f"{per * args.scale / 1e9:>15.2f} GB{size / n * args.scale / 1e9:>13.2f} GB")


if __name__ == "__main__":
    main()
