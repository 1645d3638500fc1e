"""Requeue truncated: prompts cut off at an old, lower max tokens are re-run and their new
results replace their lines in the shards they already sit in."""

from __future__ import annotations

import json

import anyio

from state.store import Store
from supervisor.servers.endpoint import Endpoint
from supervisor.shards.keys import shard_key_for
from supervisor.shards.writer import ShardWriter
from tests.fixtures.dispatching import db_rows, dispatching, job_config, open_store, serve_until


def _shard_lines(directory) -> list[dict]:
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl"))
            for line in path.read_text().splitlines()]


async def test_requeue_truncated_replaces_lines_in_place(tmp_path, sim_server):
    sim = sim_server("--sim-instant", "--sim-seed", "7", "--reasoning-parser", "qwen3")
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
            await anyio.to_thread.run_sync(writer.sync, True)
            before = {l["id"]: l for l in _shard_lines(out)}
            truncated = {i for i, l in before.items() if l["finish_reason"] == "length"}
            assert truncated and len(truncated) < len(rows)     # the sim's long tail

            await d.set_max_tokens(30_000, "test")
            assert await d.requeue_truncated("test") == len(truncated)
            await serve_until(d, astore, ep, lambda c: c.done == len(rows))
            await d.flush()
            # Nothing at the old limit is left to requeue.
            assert await astore.call(Store.requeue_truncated, 30_000) == 0
            await anyio.to_thread.run_sync(writer.sync, True)
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


async def test_loops_are_flagged_and_left_out_of_the_requeue_unless_asked(tmp_path, sim_server):
    from supervisor.sim.looping_text import loop_plan, loop_visible, prompt_words
    from supervisor.sim.output_plan import natural_length, prompt_digest

    sim = sim_server("--sim-instant", "--sim-loop-share", "0.5", "--reasoning-parser", "qwen3")
    rows = [{"id": f"q{i:03d}", "messages": [{"role": "user", "content": f"Question {i}?"}]}
            for i in range(200)]
    store = open_store(tmp_path, rows)
    out = tmp_path / "shards"
    out.mkdir()
    writer = ShardWriter(store, out, 500, shard_key_for(None))
    try:
        cfg = job_config(tmp_path, generation={"max_tokens": 4096})
        async with dispatching(store, cfg) as (d, astore):
            ep = Endpoint("gpu0", sim.base_url, 8)
            await serve_until(d, astore, ep, lambda c: c.done == len(rows))
            await d.flush()
            long, looping = await astore.call(Store.truncated_split)
            assert long > 0 and looping > 0
            q = d.snapshot().quality
            assert q.loop_total == looping
            assert abs(q.loop_rate - looping / len(rows)) < 1e-9
            await d.set_max_tokens(8192, "test")
            assert await d.requeue_truncated("test") == long
            await serve_until(d, astore, ep, lambda c: c.done == len(rows))
            await d.flush()
            assert await d.requeue_truncated("test", include_loops=True) == looping
            await serve_until(d, astore, ep, lambda c: c.done == len(rows))
            await d.flush()
            await anyio.to_thread.run_sync(writer.sync, True)
    finally:
        store.close()
    lines = {line["id"]: line for line in _shard_lines(out)}
    assert len(lines) == len(rows)
    loops = missed = 0
    for r in rows:
        line = lines[r["id"]]
        digest = prompt_digest(r["messages"], 0)
        plan = loop_plan(digest, natural_length(digest), 0.5, len(prompt_words(r["messages"])))
        truth = loop_visible(plan, line["usage"]["completion_tokens"])
        assert truth or not line["loop"], (r["id"], plan)       # no false alarm
        loops += truth
        missed += truth and not line["loop"]     # a passage longer than half the tail
        if truth:                                # a loop re-run at 8192 loops to 8192 again
            assert line["max_tokens"] == 8192 and line["finish_reason"] == "length"
    assert loops >= 10 and missed <= loops // 10
    [(detail,)] = db_rows(tmp_path, "select detail from events where kind='requeue_truncated' "
                                    "order by id limit 1")
    assert json.loads(detail)["include_loops"] is False
