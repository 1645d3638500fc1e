"""`dflash-supervisor verify` streams: its peak memory does not grow with the job.

Builds a synthetic many-node output in a directory (3 partitions, shards of 500 lines in the
daemon's line format, each partition's backup manifest with the shards' real digests) at two
sizes, SMALL and 10x SMALL lines, and runs `verify` on each in a fresh process that reports
its own peak RSS (getrusage). The figure is the ratio large/small: ~1.0 means constant
memory (the ids go into a scratch SQLite file, not a set). Lines/s is printed as well.

    python benchmarks/bench_verify.py [--lines 100000] [--repeats 3]

Runs alternate small, large, small, large...; figures are medians.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from supervisor.config import Partition  # noqa: E402
from supervisor.prompts.prompt_import import partition_of  # noqa: E402
from supervisor.shards.keys import shard_key_for  # noqa: E402
from supervisor.state_backup.keys import manifest_key  # noqa: E402
from supervisor.state_backup.manifest import BackupManifest, ShardRecord  # noqa: E402
from supervisor.uploads.file_digest import file_sha256  # noqa: E402

PARTS = 3
SHARD = 500


def line(i: int) -> bytes:
    return json.dumps({"id": f"b{i:08d}", "messages": [
        {"role": "user", "content": f"question {i}"},
        {"role": "assistant", "content": "answer " * 20, "reasoning_content": "think " * 20}],
        "finish_reason": "stop", "usage": {"prompt_tokens": 5, "completion_tokens": 40,
                                           "reasoning_tokens": 20, "total_tokens": 45},
        "max_tokens": 4096, "model": "m", "server": "gpu0", "attempt": 1, "time": 1.0},
        separators=(",", ":")).encode() + b"\n"


def build(root: Path, n: int) -> tuple[Path, Path]:
    root.mkdir(parents=True)
    prompts = root / "prompts.jsonl"
    with open(prompts, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"b{i:08d}", "prompt": f"question {i}"}) + "\n")
    sha = file_sha256(prompts)
    out = root / "out"
    per: list[list[int]] = [[] for _ in range(PARTS)]
    for i in range(n):
        per[partition_of(f"b{i:08d}", PARTS)].append(i)
    for p, ids in enumerate(per):
        part = Partition(p, PARTS)
        key_for = shard_key_for(part)
        records = []
        for seq, start in enumerate(range(0, len(ids), SHARD), 1):
            data = b"".join(line(i) for i in ids[start:start + SHARD])
            path = out / key_for(seq)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            records.append(ShardRecord(key_for(seq), len(ids[start:start + SHARD]), len(data),
                                       hashlib.sha256(data).hexdigest()))
        m = BackupManifest(str(part), sha, prompts.name, "unused", "0" * 64, 0, 0.0, 1,
                           len(ids), len(ids), tuple(records))
        (out / manifest_key(part)).parent.mkdir(parents=True, exist_ok=True)
        (out / manifest_key(part)).write_bytes(m.to_bytes())
    return prompts, out


# A fresh interpreter per run that reports its own peak RSS after verify returns.
_PROBE = ("import resource, sys; from supervisor.commands.cli import main; "
          "rc = main(['verify', '--prompts', sys.argv[1], '--output', sys.argv[2], '--quiet']); "
          "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); "
          "sys.exit(rc)")


def run_verify(prompts: Path, out: Path) -> tuple[float, float]:
    """(peak RSS MiB of the verify process, wall seconds)."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(prompts), str(out)],
                          capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"verify failed:\n{proc.stdout}\n{proc.stderr}")
    return int(proc.stderr.strip().splitlines()[-1]) / 1024, wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small = build(Path(tmp) / "small", args.lines)
        large = build(Path(tmp) / "large", 10 * args.lines)
        rates: dict[str, list[float]] = {"small": [], "large": []}
        peaks: dict[str, list[float]] = {"small": [], "large": []}
        for _ in range(args.repeats):
            for name, (prompts, out), n in (("small", small, args.lines),
                                            ("large", large, 10 * args.lines)):
                peak, wall = run_verify(prompts, out)
                peaks[name].append(peak)
                rates[name].append(n / wall)
    ps, pl = statistics.median(peaks["small"]), statistics.median(peaks["large"])
    print(f"verify peak RSS: {args.lines} lines {ps:.0f} MiB, {10 * args.lines} lines "
          f"{pl:.0f} MiB: ratio {pl / ps:.2f} (1.0 = constant memory)")
    print(f"verify speed: {statistics.median(rates['small']):.0f} / "
          f"{statistics.median(rates['large']):.0f} lines/s (small / large)")


if __name__ == "__main__":
    main()
