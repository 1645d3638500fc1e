"""A dense stream (SGLang's default `--stream-interval 1`: a chunk per token) through the
real dispatcher, a real simulated server (child process, loopback HTTP) and a real SQLite
store: once a stream has run for PACE_AFTER_S at more than DENSE_CHUNKS_PER_S chunks a
second, its socket is read every PACE_S (stream_request._paced: the chunks gather in the
kernel, one wake-up reads them all), and every answer is still recorded exactly as the
server gives it unstreamed."""

from __future__ import annotations

import json

import httpx

from supervisor.dispatch import stream_request
from supervisor.servers.endpoint import Endpoint
from supervisor.sglang.chat_request import request_body
from tests.fixtures.dispatching import db_rows, dispatching, job_config, open_store, serve_until

PROMPTS = 4
MAX_TOKENS = 600          # at 300 tok/s: 2 s a stream, past PACE_AFTER_S


async def test_a_dense_stream_is_read_in_batches_and_recorded_whole(tmp_path, sim_server,
                                                                     monkeypatch):
    sim = sim_server("--max-running-requests", str(PROMPTS), "--reasoning-parser", "qwen3",
                     "--stream-interval", "1", "--sim-tokens-per-s", "300")
    paced = 0
    real_paced = stream_request._paced

    async def counted(transport):     # the real pause, counted
        nonlocal paced
        paced += 1
        await real_paced(transport)

    monkeypatch.setattr(stream_request, "_paced", counted)
    rows = [{"id": f"p{i}", "messages": [{"role": "user", "content":
             f"Explain, at length, how machine number {i} works."}]} for i in range(PROMPTS)]
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, generation={"max_tokens": MAX_TOKENS})
    assert cfg.dispatch.stream
    try:
        async with dispatching(store, cfg) as (d, astore):
            await serve_until(d, astore, Endpoint("gpu0", sim.base_url, PROMPTS),
                              lambda c: c.done == PROMPTS)
            await d.flush()
    finally:
        store.close()

    # Read in batches: a pause every PACE_S after the first PACE_AFTER_S of each stream
    # (~20 a second each), not one read per token (600 a stream).
    assert paced >= PROMPTS * 5, paced
    got = {r[0]: r[1:] for r in db_rows(
        tmp_path, "select id, content, reasoning_content, finish_reason, completion_tokens, "
                  "attempts from prompts")}
    with httpx.Client(trust_env=False) as client:
        for row in rows:
            body = request_body(cfg.job.model, row["messages"], cfg.generation, MAX_TOKENS)
            ref = client.post(sim.base_url + "/v1/chat/completions", content=json.dumps(body),
                              headers={"content-type": "application/json"}, timeout=30).json()
            choice = ref["choices"][0]
            assert got[row["id"]] == (choice["message"]["content"],
                                      choice["message"]["reasoning_content"],
                                      choice["finish_reason"],
                                      ref["usage"]["completion_tokens"], 1), row["id"]
