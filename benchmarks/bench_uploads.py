"""Upload benchmark: the uploader against a bare boto3 loop, same store, same bytes, same run.

Setup: moto's S3 server as a child process on loopback, and a real state DB whose done
prompts form `--shards` shards of 500 lines each (about `--shard-mb` MB a shard, written by
the real shard writer into a spool).

Timed, each `--runs` times, into a fresh prefix:
- baseline: `put_object` of every spool file from `--concurrency` threads, nothing else (no
  digests, no verification, no DB);
- uploader: `Uploader.drain()` with the S3 sink — reading and hashing each file, Content-MD5
  and SHA-256 headers, multipart above the threshold, ETag / part-digest verification, marking
  the shard in the DB, deleting the spool copy (the copies are restored between runs).
While the uploader runs, a ticker on the same event loop records its worst lateness: the
uploads must not stall the loop dispatch runs on.

Loopback moto is CPU-bound, not network-bound, so the ratio (what verification and
bookkeeping cost over a bare put) is the figure to read, not the MB/s.

    .venv/bin/python benchmarks/bench_uploads.py [--shards 24] [--shard-mb 6] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MiB = 1024 * 1024
LINES = 500


def build(work: Path, shards: int, shard_mb: float) -> tuple[object, Path]:
    from state.records import Completion, Done, ImportRow
    from state.store import Store
    from supervisor.shards.writer import ShardWriter

    work.mkdir(parents=True)
    store = Store.open(work / "job.db")
    n = shards * LINES
    store.import_batch([ImportRow(f"p{i:07d}", [{"role": "user", "content": f"q{i}"}], i + 1)
                        for i in range(n)])
    # Incompressible-ish text of the right size: every line differs.
    per_line = int(shard_mb * 1e6 / LINES)
    claimed = store.claim(n, "gpu0", time.time())
    now = time.time()
    store.record([Done(id=c.id, completion=Completion(
                           content=(c.id + os.urandom(per_line // 2).hex())[:per_line],
                           reasoning_content="r", finish_reason="stop", prompt_tokens=1,
                           completion_tokens=1, reasoning_tokens=0), max_tokens=1, model="m",
                       server="gpu0", started_at=now, finished_at=now + i * 1e-6)
                  for i, c in enumerate(claimed)])
    spool = work / "spool"
    ShardWriter(store, spool, LINES, lambda s: f"shard-{s:06d}.jsonl").sync(True)
    return store, spool


def baseline(client: object, bucket: str, prefix: str, files: list[Path],
             concurrency: int) -> float:
    def put(path: Path) -> None:
        client.put_object(Bucket=bucket, Key=prefix + path.name, Body=path.read_bytes())  # type: ignore[attr-defined]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(put, files))
    return time.perf_counter() - t0


def ours(store: object, spool: Path, endpoint: str, bucket: str, prefix: str,
         concurrency: int) -> tuple[float, float]:
    import anyio

    from state.async_store import AsyncStore
    from supervisor.config import UploadsSection
    from supervisor.uploads.s3_client import S3Location
    from supervisor.uploads.s3_sink import S3Sink
    from supervisor.uploads.uploader import Uploader

    settings = UploadsSection(endpoint_url=endpoint, concurrency=concurrency)
    sink = S3Sink(S3Location.parse(f"s3://{bucket}/{prefix}"), settings)
    up = Uploader(AsyncStore(store), sink, spool, concurrency=concurrency)  # type: ignore[arg-type]
    worst = [0.0]

    async def main() -> float:
        async def ticker() -> None:
            while True:
                t = time.perf_counter()
                await anyio.sleep(0.005)
                worst[0] = max(worst[0], time.perf_counter() - t - 0.005)

        # The client is built once per daemon (parsing botocore's S3 model holds the GIL for
        # tens of ms, a one-off at start): build it first, so the figure is the uploads'.
        await anyio.to_thread.run_sync(lambda: sink.client)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            t0 = time.perf_counter()
            assert await up.drain(600), "the backlog did not drain"
            elapsed = time.perf_counter() - t0
            tg.cancel_scope.cancel()
        return elapsed

    return anyio.run(main), worst[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shards", type=int, default=24)
    p.add_argument("--shard-mb", type=float, default=6.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=4)
    args = p.parse_args()

    from benchmarks.harness import s3_client, start_moto, use_dummy_aws

    use_dummy_aws()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        moto, moto_url = start_moto(work / "moto.log")
        try:
            client = s3_client(moto_url)
            client.create_bucket(Bucket="bench-uploads")
            base_t, our_t, lags = [], [], []
            for run in range(args.runs):
                # A fresh DB and spool each run (the uploader deletes what it uploaded).
                store, spool = build(work / f"run{run}", args.shards, args.shard_mb)
                files = sorted(spool.glob("*.jsonl"))
                total = sum(f.stat().st_size for f in files)
                if run == 0:
                    print(f"{len(files)} shards, {total / 1e6:.0f} MB, "
                          f"concurrency {args.concurrency}")
                base_t.append(baseline(client, "bench-uploads", f"base{run}/", files,
                                       args.concurrency))
                t, lag = ours(store, spool, moto_url, "bench-uploads", f"ours{run}/",
                              args.concurrency)
                our_t.append(t)
                lags.append(lag)
                store.close()  # type: ignore[attr-defined]
                shutil.rmtree(work / f"run{run}")
            b, o = statistics.median(base_t), statistics.median(our_t)
            print(f"baseline (bare put_object): {total / b / 1e6:6.1f} MB/s  median {b:.2f} s")
            print(f"uploader (verified, marked): {total / o / 1e6:6.1f} MB/s  median {o:.2f} s")
            print(f"uploader time / baseline time: {o / b:.2f}")
            print(f"worst event-loop lateness during uploads: {max(lags) * 1000:.1f} ms")
        finally:
            os.killpg(moto.pid, signal.SIGKILL)
            moto.wait(timeout=10)


if __name__ == "__main__":
    main()
