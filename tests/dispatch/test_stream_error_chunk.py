"""A stream that SGLang ends with an error chunk after tokens went out, through the real
dispatcher streaming to a real simulated server (child process, loopback HTTP) and a real
SQLite store.

SGLang 0.5.23 aborts a request with an error status mid-decode (the scheduler's out-of-memory
abort, `sglang/srt/managers/schedule_batch.py` retract_decode) and streams
`data: {"error": {..., "code": 500}}` after the text so far
(`sglang/srt/entrypoints/openai/serving_chat.py`, serving_base.py
create_streaming_error_response); `--sim-error-share` makes the simulator do it to the first
request of a stable share of the prompts. The dispatcher must retry the prompt (an attempt
counted), count the error by its kind, put the tokens streamed before the error in the waste
ledger as retry waste, and record each prompt's whole answer exactly once.
"""

from __future__ import annotations

import json

import httpx

from state.store import Store
from supervisor.contract.waste_causes import WasteCause as W
from supervisor.servers.endpoint import Endpoint
from supervisor.sglang.chat_request import request_body
from tests.fixtures.dispatching import db_rows, dispatching, job_config, open_store, serve_until

PROMPTS = 16
MAX_TOKENS = 300


def _rows(n: int) -> list[dict]:
    return [{"id": f"p{i:03d}", "messages": [{"role": "user", "content":
            f"Describe in detail the workings of machine number {i}."}]} for i in range(n)]


async def test_an_error_chunk_mid_stream_is_retried_counted_and_its_tokens_wasted(
        tmp_path, sim_server):
    sim = sim_server("--max-running-requests", "4", "--reasoning-parser", "qwen3",
                     "--sim-tokens-per-s", "20000", "--sim-error-share", "0.5")
    rows = _rows(PROMPTS)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, generation={"max_tokens": MAX_TOKENS},
                     dispatch={"max_attempts": 3})
    assert cfg.dispatch.stream
    try:
        async with dispatching(store, cfg) as (d, astore):
            await serve_until(d, astore, Endpoint("gpu0", sim.base_url, 4),
                              lambda c: c.done == PROMPTS)
            await d.flush()
            snap = d.snapshot()
            progress = d.progress("gpu0")
            ledger = await astore.call(Store.token_ledger)
    finally:
        store.close()

    attempts = dict(db_rows(tmp_path, "select id, attempts from prompts"))
    retried = {p for p, n in attempts.items() if n == 2}
    # Every prompt answered once; those the server aborted took exactly one more attempt.
    assert db_rows(tmp_path, "select status, count(*) from prompts group by status") == \
        [("done", PROMPTS)]
    assert set(attempts.values()) <= {1, 2} and retried

    # The errors were seen as what they are: HTTP 500s, one per aborted attempt.
    assert snap.breaker.errors_by_kind == {"HTTP 500": len(retried)}
    assert snap.breaker.errors_total == progress.errors == len(retried)
    assert snap.breaker.tripped is None
    assert "Out of memory even after retracting" in (progress.last_error or "")

    # What each aborted attempt had streamed is retry waste, counted by the server (the
    # running usage of continuous_usage_stats), one row per aborted attempt.
    waste = db_rows(tmp_path, "select prompt_id, cause, tokens, estimated, server from waste")
    assert {r[0] for r in waste} == retried and len(waste) == len(retried)
    assert all(cause == W.RETRY.value and tokens > 0 and estimated == 0 and server == "gpu0"
               for _, cause, tokens, estimated, server in waste)
    # Every token the server generated is either in a recorded answer or in the ledger.
    state = httpx.get(sim.base_url + "/sim/state", timeout=5, trust_env=False).json()
    assert ledger.kept_tokens + ledger.tokens_for(W.RETRY) == state["generation_tokens_total"]
    assert ledger.wasted_tokens == ledger.tokens_for(W.RETRY)

    # Exactly once, and whole: each recorded answer is the one the server gives the prompt
    # unstreamed (the error share only strikes a prompt's first request).
    got = {r[0]: r[1:] for r in db_rows(
        tmp_path, "select id, content, reasoning_content, finish_reason, completion_tokens "
                  "from prompts")}
    with httpx.Client(trust_env=False) as client:
        for row in rows:
            body = request_body(cfg.job.model, row["messages"], cfg.generation, MAX_TOKENS)
            ref = client.post(sim.base_url + "/v1/chat/completions", content=json.dumps(body),
                              headers={"content-type": "application/json"}, timeout=30).json()
            choice = ref["choices"][0]
            assert got[row["id"]] == (choice["message"]["content"],
                                      choice["message"]["reasoning_content"],
                                      choice["finish_reason"],
                                      ref["usage"]["completion_tokens"]), row["id"]


async def test_unstreamed_the_same_abort_is_an_http_500_retried_and_answered_once(
        tmp_path, sim_server):
    # dispatch.stream off: SGLang answers the aborted request with a plain 500 (no tokens
    # are reported, so there is nothing for the waste ledger to count).
    sim = sim_server("--max-running-requests", "4", "--reasoning-parser", "qwen3",
                     "--sim-tokens-per-s", "20000", "--sim-error-share", "0.5")
    rows = _rows(PROMPTS)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, generation={"max_tokens": MAX_TOKENS},
                     dispatch={"max_attempts": 3, "stream": False})
    try:
        async with dispatching(store, cfg) as (d, astore):
            await serve_until(d, astore, Endpoint("gpu0", sim.base_url, 4),
                              lambda c: c.done == PROMPTS)
            snap = d.snapshot()
    finally:
        store.close()
    attempts = dict(db_rows(tmp_path, "select id, attempts from prompts where status = 'done'"))
    retried = {p for p, n in attempts.items() if n == 2}
    assert len(attempts) == PROMPTS and set(attempts.values()) <= {1, 2} and retried
    assert snap.breaker.errors_by_kind == {"HTTP 500": len(retried)}
