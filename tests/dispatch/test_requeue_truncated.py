"""Requeue truncated: prompts cut off at an old, lower max tokens are re-run and their new
results replace their lines in the shards they already sit in."""

from __future__ import annotations

import json

from state.store import Store
from supervisor.shards.keys import shard_key_for
from supervisor.servers.endpoint import Endpoint
from supervisor.shards.writer import ShardWriter

from .helpers import db_rows, dispatching, job_config, open_store, serve_until


def _shard_lines(directory) -> list[dict]:
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl"))
            for line in path.read_text().splitlines()]


async def test_requeue_truncated_replaces_lines_in_place(tmp_path, sim_server):
    sim = sim_server("--sim-instant", "--sim-seed", "7")
    rows = [{"id": f"q{i:03d}", "messages": [{"role": "user", "content": f"Question {i}?"}]}
            for i in range(60)]
    store = open_store(tmp_path, rows)
    out = tmp_path / "shards"
    out.mkdir()
    writer = ShardWriter(store, out, 25, shard_key_for(None))
    try:
        cfg = job_config(tmp_path, generation={"max_tokens": 4096})
        async with dispatching(store, cfg) as (d, astore):
            ep = Endpoint("gpu0", sim.base_url, 8)
            await serve_until(d, astore, ep, lambda c: c.done == len(rows))
            await d.flush()
            writer.sync(True)
            before = {l["id"]: l for l in _shard_lines(out)}
            truncated = {i for i, l in before.items() if l["finish_reason"] == "length"}
            assert truncated and len(truncated) < len(rows)     # the sim's long tail

            await d.set_max_tokens(30_000, "test")
            assert await d.requeue_truncated("test") == len(truncated)
            await serve_until(d, astore, ep, lambda c: c.done == len(rows))
            await d.flush()
            # Nothing at the old limit is left to requeue.
            assert await astore.call(Store.requeue_truncated, 30_000) == 0
            writer.sync(True)
    finally:
        store.close()
    after = _shard_lines(out)
    ids = [l["id"] for l in after]
    assert sorted(ids) == sorted(r["id"] for r in rows)          # each exactly once
    assert len(list(out.glob("*.jsonl"))) == 3                   # same shards, rewritten
    for line in after:
        if line["id"] in truncated:
            assert line["max_tokens"] == 30_000 and line["attempt"] == 2
        else:
            assert line == before[line["id"]]                    # untouched lines unchanged
    [(count,)] = db_rows(tmp_path, "select count(*) from events where kind='requeue_truncated'")
    assert count == 1
