"""Streamed dispatch against real simulated SGLang servers (child processes, loopback HTTP)
and a real SQLite store: the same answers as unstreamed, stalls aborted and retried, loops
aborted while they run."""

from __future__ import annotations

import json

import anyio
import httpx

from state.store import Store
from supervisor.contract.waste_causes import WasteCause as W
from supervisor.dispatch.event_fold import named_requests
from supervisor.servers.endpoint import Endpoint
from tests.fixtures.dispatching import (
    db_rows,
    dispatching,
    job_config,
    open_store,
    serve_until,
    wait_until,
)
from tests.fixtures.real_prompts import real_prompts

FIELDS = ("id, status, attempts, finish_reason, prompt_tokens, completion_tokens, "
          "reasoning_tokens, content, reasoning_content, max_tokens, server, loop")


def _rows(n: int) -> list[dict]:
    return [{"id": f"p{i:04d}", "messages": [{"role": "user", "content":
            f"Explain, at length, topic number {i} and its history."}]} for i in range(n)]


async def _sim_post(base_url: str, path: str, body: dict) -> None:
    async with httpx.AsyncClient(trust_env=False) as c:
        (await c.post(base_url + path, json=body, timeout=5)).raise_for_status()


async def test_a_streamed_answer_equals_the_unstreamed_one_field_for_field(tmp_path, sim_server):
    sim = sim_server("--sim-instant", "--max-running-requests", "8",
                     "--reasoning-parser", "qwen3", "--sim-empty-rate", "0.1")
    rows = real_prompts()
    got = {}
    for stream in (True, False):
        where = tmp_path / str(stream)
        where.mkdir()
        store = open_store(where, rows)
        cfg = job_config(where, job={"model": "test-model"},
                         generation={"max_tokens": 2048}, dispatch={"stream": stream})
        try:
            async with dispatching(store, cfg) as (d, astore):
                await serve_until(d, astore, Endpoint("gpu0", sim.base_url, 8),
                                  lambda c: c.done == len(rows))
        finally:
            store.close()
        got[stream] = db_rows(where, f"select {FIELDS} from prompts order by id")
    assert len(got[True]) == len(rows)
    assert got[True] == got[False]
    finishes = {r[3] for r in got[True]}
    assert {"stop", "length"} <= finishes            # both kinds of ending were compared
    assert any(r[7] == "" for r in got[True])        # and empty answers (--sim-empty-rate)


async def test_a_stalled_request_is_aborted_retried_and_then_answered(tmp_path, sim_server):
    # Paced decoding (~0.1 s a request); the stall share holds every prompt's first request
    # halfway, after some tokens (the stall fault is a stuck scheduler now: no tokens at
    # all), so with stall_s 0.3 the dispatcher aborts it and counts a retry.
    sim = sim_server("--max-running-requests", "2", "--reasoning-parser", "qwen3",
                     "--sim-tokens-per-s", "2000", "--sim-time-scale", "1")
    rows = _rows(6)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, generation={"max_tokens": 200},
                     dispatch={"stall_s": 0.3, "max_attempts": 5})
    try:
        async with dispatching(store, cfg) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 2), draining)
                await _sim_post(sim.base_url, "/sim/fault", {"stall_share": 1.0})
                await wait_until(lambda: d.snapshot().streamed.stalls >= 1, 30, "a stall")
                await _sim_post(sim.base_url, "/sim/fault", {"stall_share": 0.0})

                async def all_done() -> bool:
                    return (await astore.call(Store.counts)).done == len(rows)
                await wait_until(all_done, 60, "every prompt done")
                draining.set()
            stalls = d.snapshot().streamed.stalls
            await d.flush()
            ledger = await astore.call(Store.token_ledger)
    finally:
        store.close()
    events = [json.loads(detail) for (detail,) in db_rows(
        tmp_path, "select detail from events where kind = 'request_stalled'")]
    # Stalls after the first are folded into a summary row (event_fold.py): counted exactly.
    assert sum(e["count"] for e in events) == stalls >= 1
    attempts = dict(db_rows(tmp_path, "select id, attempts from prompts"))
    for e in events:
        assert e["stall_s"] == 0.3 and e["tokens"] > 0
        for r in named_requests(e):
            # The rid names the prompt and its attempt; the stall counted that attempt.
            assert r["rid"].startswith(f"{r['prompt']}#")
            assert attempts[r["prompt"]] >= int(r["rid"].split("#")[1]) + 1
    assert db_rows(tmp_path, "select status, count(*) from prompts group by status") == \
        [("done", len(rows))]
    stalled = {p for (p,) in db_rows(tmp_path, "select prompt_id from waste "
                                     "where cause = 'stall'")}
    assert {r["prompt"] for e in events for r in named_requests(e)} <= stalled
    assert all(attempts[p] >= 2 for p in stalled)
    # What the stalled attempts had generated is in the waste ledger as stall waste.
    assert ledger.tokens_for(W.STALL) == sum(e["tokens"] for e in events)
    state = json.loads(httpx.get(sim.base_url + "/sim/state", timeout=5).text)
    assert state["running"] == 0                     # nothing left held on the server


async def test_three_stalls_on_one_server_mark_it_hung(tmp_path, sim_server):
    sim = sim_server("--max-running-requests", "3", "--reasoning-parser", "qwen3",
                     "--sim-tokens-per-s", "2000", "--sim-time-scale", "1",
                     "--sim-stall-share", "1")
    rows = _rows(3)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, generation={"max_tokens": 100},
                     dispatch={"stall_s": 0.3, "max_attempts": 5})
    try:
        async with dispatching(store, cfg) as (d, astore):
            draining = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 3), draining)
                await wait_until(lambda: d.progress("gpu0").hung is not None, 30, "hung")
                draining.set()
            hung = d.progress("gpu0").hung
            # A new life of the server starts clean.
            async with anyio.create_task_group() as tg:
                again = anyio.Event()
                again.set()
                tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 3), again)
            assert d.progress("gpu0").hung is None
    finally:
        store.close()
    assert hung is not None and hung.startswith("hang: 3 requests stalled")


async def test_a_looping_answer_is_aborted_early_and_flagged(tmp_path, sim_server):
    # Every long answer loops (--sim-loop-share 1); decoding is paced (16,000 tokens take
    # ~0.5 s) so the abort lands long before max_tokens.
    max_tokens = 16000
    sim = sim_server("--max-running-requests", "8", "--reasoning-parser", "qwen3",
                     "--sim-loop-share", "1", "--context-length", "32768",
                     "--sim-tokens-per-s", "32000", "--sim-time-scale", "1")
    rows = _rows(24)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, generation={"max_tokens": max_tokens},
                     servers={"flags": {"context-length": 32768}})
    try:
        async with dispatching(store, cfg) as (d, astore):
            await serve_until(d, astore, Endpoint("gpu0", sim.base_url, 8),
                              lambda c: c.done == len(rows))
            figures = d.snapshot().streamed
            looped = d.quality.snapshot().loop_total
            await d.flush()
            ledger = await astore.call(Store.token_ledger)
    finally:
        store.close()
    loops = db_rows(tmp_path, "select id, finish_reason, completion_tokens, attempts from "
                    "prompts where loop = 1")
    assert loops, "no prompt looped: the test proves nothing"
    for pid, finish, tokens, attempts in loops:
        assert finish == "length" and attempts == 1, pid
        assert 0 < tokens < max_tokens // 2, (pid, tokens)     # cut well before the limit
    assert figures.loops_aborted == len(loops) == looped
    assert figures.loop_tokens_saved == sum(max_tokens - t for _, _, t, _ in loops)
    # The looping answers' tokens are the ledger's loop waste (counted by the store).
    assert ledger.tokens_for(W.LOOP) == sum(t for _, _, t, _ in loops)
    events = [json.loads(d) for (d,) in db_rows(
        tmp_path, "select detail from events where kind='loop_aborted'")]
    # One row at once, the rest folded into a summary written when the dispatcher stopped.
    assert sum(e["count"] for e in events) == len(loops)
    assert sum(e["saved"] for e in events) == figures.loop_tokens_saved
    assert {r["prompt"] for e in events for r in named_requests(e)} <= {p for p, *_ in loops}
    # Answers that did not loop ran to their end.
    others = db_rows(tmp_path, "select finish_reason from prompts where loop = 0")
    assert all(f in ("stop", "length") for (f,) in others)


async def test_requests_cut_off_with_their_server_are_stop_or_crash_waste(tmp_path, sim_server):
    # Slow decoding (a request takes ~2 s): serve() is cancelled while every slot streams,
    # as the fleet does when the server fails, or a graceful stop's grace runs out.
    sim = sim_server("--max-running-requests", "4", "--reasoning-parser", "qwen3",
                     "--sim-tokens-per-s", "200", "--sim-time-scale", "1")
    for stopping, cause in ((False, W.CRASH), (True, W.STOP)):
        where = tmp_path / cause.value
        where.mkdir()
        rows = _rows(4)
        store = open_store(where, rows)
        cfg = job_config(where, generation={"max_tokens": 400})
        try:
            async with dispatching(store, cfg) as (d, astore):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(d.serve, Endpoint("gpu0", sim.base_url, 4), anyio.Event())
                    await wait_until(lambda: d.progress("gpu0").in_flight == 4, 30, "busy")
                    await anyio.sleep(0.5)                 # tokens streaming in
                    if stopping:
                        d.stop_claiming()
                    tg.cancel_scope.cancel()
                await d.flush()
                ledger = await astore.call(Store.token_ledger)
                counts = await astore.call(Store.counts)
        finally:
            store.close()
        assert counts.pending == len(rows) and counts.done == 0
        assert db_rows(where, "select max(attempts) from prompts") == [(0,)]
        wasted = db_rows(where, "select cause, count(*), min(tokens) from waste group by cause")
        assert [(c, n) for c, n, _ in wasted] == [(cause.value, len(rows))], wasted
        assert wasted[0][2] > 0 and ledger.tokens_for(cause) > 0


async def test_stuck_requests_are_aborted_by_their_rid_and_retried_once(tmp_path, sim_server):
    # A fifth of the prompts get stuck halfway through their first request (the simulator's
    # stall share); the server itself stays fine.
    sim = sim_server("--max-running-requests", "4", "--reasoning-parser", "qwen3",
                     "--sim-tokens-per-s", "4000", "--sim-time-scale", "1",
                     "--sim-stall-share", "0.2")
    rows = _rows(20)
    store = open_store(tmp_path, rows)
    cfg = job_config(tmp_path, generation={"max_tokens": 300}, dispatch={"stall_s": 0.5})
    try:
        async with dispatching(store, cfg) as (d, astore):
            await serve_until(d, astore, Endpoint("gpu0", sim.base_url, 4),
                              lambda c: c.done == len(rows))
            await d.flush()
            ledger = await astore.call(Store.token_ledger)
            hung = d.progress("gpu0").hung
    finally:
        store.close()
    events = [json.loads(detail) for (detail,) in db_rows(
        tmp_path, "select detail from events where kind = 'request_stalled' order by id")]
    assert events, "no request got stuck: the test proves nothing"
    stalls = sum(e["count"] for e in events)        # later stalls folded into a summary
    state = json.loads(httpx.get(sim.base_url + "/sim/state", timeout=5).text)
    attempts = dict(db_rows(tmp_path, "select id, attempts from prompts"))
    stuck = {p for (p,) in db_rows(tmp_path, "select prompt_id from waste "
                                   "where cause = 'stall'")}
    assert len(stuck) == stalls                     # each stuck once, then answered
    # Each stuck request was aborted on the server by exactly its own request id: its
    # first attempt's, and the rows name those ids.
    assert sorted(r.split("#")[0] for r in state["aborted_rids"]) == sorted(stuck)
    assert all(r.split("#")[1] == "1" for r in state["aborted_rids"])
    assert {r["rid"] for e in events for r in named_requests(e)} <= set(state["aborted_rids"])
    assert all(attempts[p] == (2 if p in stuck else 1) for p in attempts)
    assert db_rows(tmp_path, "select count(*) from prompts where status = 'done'") == \
        [(len(rows),)]
    # The tokens each stuck request cost are the server's own count (its abort's usage).
    assert ledger.tokens_for(W.STALL) == sum(e["tokens"] for e in events) > 0
    assert db_rows(tmp_path, "select count(*), sum(estimated) from waste "
                   "where cause = 'stall'") == [(stalls, 0)]
    assert (hung is not None) == (stalls >= 3)      # stalls pile up: a hung server
