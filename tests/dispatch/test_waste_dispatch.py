"""The waste ledger as the dispatcher and an operator's requeue fill it, against the
simulated SGLang server (a real process, real HTTP) and a real state DB."""

from __future__ import annotations

import anyio
import httpx

from state.store import Store
from supervisor.contract.waste_causes import WasteCause as W
from supervisor.dispatch.completion import Retryable, classify_answer
from supervisor.servers.endpoint import Endpoint
from tests.fixtures.dispatching import (
    db_rows,
    dispatching,
    job_config,
    open_store,
    serve_until,
    wait_until,
)


def _rows(n: int) -> list[dict]:
    return [{"id": f"q{i:03d}", "messages": [{"role": "user", "content": f"Question {i}?"}]}
            for i in range(n)]


def test_an_abort_carries_the_tokens_it_had_generated():
    # SGLang ends an aborted request with finish_reason "abort" and the usage so far
    # (`sglang/srt/managers/tokenizer_manager.py` _handle_abort_req; the simulator's cut()).
    answer = classify_answer({"choices": [{"message": {"content": "partial"},
                                           "finish_reason": "abort"}],
                              "usage": {"prompt_tokens": 9, "completion_tokens": 37}}, "")
    assert isinstance(answer, Retryable) and answer.kind == "abort" and answer.tokens == 37


async def test_requeued_truncated_answers_are_wasted_and_goodput_follows(tmp_path, sim_server):
    sim = sim_server("--sim-instant", "--sim-seed", "7", "--reasoning-parser", "qwen3")
    rows = _rows(60)
    store = open_store(tmp_path, rows)
    try:
        cfg = job_config(tmp_path, generation={"max_tokens": 4096})
        async with dispatching(store, cfg) as (d, astore):
            ep = Endpoint("gpu0", sim.base_url, 8)
            await serve_until(d, astore, ep, lambda c: c.done == len(rows))
            await d.flush()
            first = await astore.call(Store.token_ledger)
            [(all_tokens, cut_tokens)] = db_rows(
                tmp_path, "SELECT sum(completion_tokens), sum(completion_tokens) FILTER "
                          "(WHERE finish_reason = 'length') FROM prompts")
            assert cut_tokens and first.kept_tokens == all_tokens and first.goodput == 1.0

            await d.set_max_tokens(30_000, "test")
            requeued = await d.requeue_truncated("test")
            mid = await astore.call(Store.token_ledger)
            assert mid.tokens_for(W.REQUEUE) == cut_tokens
            assert mid.kept_tokens == all_tokens - cut_tokens
            await serve_until(d, astore, ep, lambda c: c.done == len(rows))
            await d.flush()
            last = await astore.call(Store.token_ledger)
    finally:
        store.close()
    [(now_tokens,)] = db_rows(tmp_path, "SELECT sum(completion_tokens) FROM prompts")
    assert last.kept_tokens == now_tokens and last.kept_answers == len(rows)
    assert last.tokens_for(W.REQUEUE) == cut_tokens and last.wasted_tokens == cut_tokens
    assert last.goodput == now_tokens / (now_tokens + cut_tokens)
    assert db_rows(tmp_path, "SELECT count(*), sum(tokens) FROM waste WHERE cause = 'requeue'"
                   ) == [(requeued, cut_tokens)]


async def test_an_aborted_request_is_retried_and_its_tokens_wasted(tmp_path, sim_server):
    # 20 tokens/s and 60 at most: the request still decodes when every request is aborted
    # a second in, and its retry ends within 3 s.
    sim = sim_server("--sim-tokens-per-s", "20", "--sim-seed", "3", "--reasoning-parser",
                     "qwen3")
    store = open_store(tmp_path, _rows(1))
    try:
        cfg = job_config(tmp_path, dispatch={"stream": False, "max_attempts": 3},
                         generation={"max_tokens": 60})
        async with dispatching(store, cfg) as (d, astore):
            ep = Endpoint("gpu0", sim.base_url, 1)
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve_until, d, astore, ep, lambda c: c.done == 1, 30.0)
                await wait_until(lambda: d.progress("gpu0").in_flight == 1, 30, "in flight")
                await anyio.sleep(1.0)                       # ~20 tokens generated
                async with httpx.AsyncClient(trust_env=False) as client:
                    r = await client.post(sim.base_url + "/abort_request",
                                          json={"abort_all": True})
                    assert r.status_code == 200
    finally:
        store.close()
    [(tokens, server, attempts)] = db_rows(
        tmp_path, "SELECT w.tokens, w.server, p.attempts FROM waste w "
                  "JOIN prompts p ON p.id = w.prompt_id WHERE w.cause = 'retry'")
    assert tokens > 0 and server == "gpu0" and attempts == 2
    assert db_rows(tmp_path, "SELECT tokens FROM token_ledger WHERE cause = 'retry'") == [
        (tokens,)]
