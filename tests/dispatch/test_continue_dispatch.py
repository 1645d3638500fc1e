"""The dispatcher continuing truncated answers from their exact tokens, against the simulator
and against real SGLang 0.5.23 (the CPU server; the real_sglang tier): answers cut off at 16
tokens, the limit raised to 32 with continue, and each continued answer's ids are its stored
16 followed by the continuation's, equal at temperature 0 to one 32-token run of the same
prompt, and its text and reasoning split those of the one-go answer; truncated again at 32,
continued again to 48, the same holds for its three parts.

Through the real dispatcher (request path, stitching with the server's /detokenize) and a
real SQLite store; the one-go answers are asked of the same server directly."""

from __future__ import annotations

import json

import httpx
import pytest

from state.store import Store
from state.token_ids_table import unpack_ids
from supervisor.servers.endpoint import Endpoint
from supervisor.sglang.token_ids import RETURN_IDS_HEADERS
from tests.fixtures.dispatching import db_rows, dispatching, job_config, open_store, serve_until
from tests.fixtures.real_sglang import FidelityServer

# The real server takes minutes to start on a busy CPU machine, and decodes slowly.
pytestmark = pytest.mark.timeout(600)
OLD, NEW, AGAIN = 16, 32, 48
ROWS = [{"id": f"p{i}", "messages": [{"role": "user", "content": f"Count the stars, part {i}."}]}
        for i in range(3)]


def _one_go(server: FidelityServer, messages: list[dict], limit: int) -> dict:
    """The streamed answer at `limit` in one request: its text, split and ids."""
    body = {"model": server.model, "messages": messages, "max_completion_tokens": limit,
            "temperature": 0.0, "top_p": 1.0, "stream": True, "separate_reasoning": True,
            "chat_template_kwargs": {"enable_thinking": True},
            "stream_options": {"include_usage": True}}
    reasoning, content, out = [], [], {}
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body,
                      headers=RETURN_IDS_HEADERS, timeout=120, trust_env=False) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            if event.get("sglext"):
                out["ids"] = event["sglext"]["output_ids"][0]
            for choice in event.get("choices") or []:
                reasoning.append(choice["delta"].get("reasoning_content") or "")
                content.append(choice["delta"].get("content") or "")
                out["finish"] = choice["finish_reason"] or out.get("finish")
    out["reasoning"], out["content"] = "".join(reasoning), "".join(content)
    return out


async def test_continued_answers_equal_one_run_at_the_new_limit(
        tmp_path, fidelity_server: FidelityServer):  # noqa: F811
    server = fidelity_server
    store = open_store(tmp_path, ROWS)
    cfg = job_config(tmp_path, job={"model": server.model},
                     generation={"max_tokens": OLD, "temperature": 0.0, "top_p": 1.0,
                                 "enable_thinking": True},
                     servers={"flags": {"context-length": 2048}})
    endpoint = Endpoint("gpu0", server.base_url, 4)
    try:
        async with dispatching(store, cfg) as (d, astore):
            await serve_until(d, astore, endpoint, lambda c: c.done == len(ROWS), 300)
            await d.flush()
            first = {pid: unpack_ids(blob) for pid, blob in db_rows(
                tmp_path, "SELECT prompt_id, output_ids FROM answer_tokens")}
            await d.set_max_tokens(NEW, "test")
            got = await d.continue_truncated("test")
            assert got.continued == len(first) and got.from_scratch == 0
            await serve_until(d, astore, endpoint, lambda c: c.done == len(ROWS), 300)
            await d.flush()
            totals = await astore.call(Store.continued_totals)
            second = {pid: unpack_ids(blob) for pid, blob in db_rows(
                tmp_path, "SELECT prompt_id, output_ids FROM answer_tokens")}
            after_first = {r[0]: r[1:] for r in db_rows(
                tmp_path, "SELECT id, content, reasoning_content, finish_reason, "
                "completion_tokens, continued_from FROM prompts")}
            await d.set_max_tokens(AGAIN, "test")
            again = await d.continue_truncated("test")
            await serve_until(d, astore, endpoint, lambda c: c.done == len(ROWS), 300)
            await d.flush()
    finally:
        store.close()
    assert first, "no answer was cut off at 16 tokens"
    assert totals == (len(first), OLD * len(first))
    for pid, stored in first.items():
        assert len(stored) == OLD
        messages = next(r["messages"] for r in ROWS if r["id"] == pid)
        one_go = _one_go(server, messages, NEW)
        content, reasoning, finish, tokens, continued_from = after_first[pid]
        assert continued_from == OLD
        assert one_go["ids"][:OLD] == list(stored), f"{server.kind}: {pid}'s first part"
        assert (finish, tokens) == (one_go["finish"], len(one_go["ids"])), server.kind
        assert (content, reasoning or "") == (one_go["content"], one_go["reasoning"]), \
            f"{server.kind}: {pid}'s text"
        if finish == "length":
            assert list(second[pid]) == one_go["ids"], server.kind
    # Truncated again at 32: continued again, from all 32 kept ids, to one 48-token run.
    assert again.continued == len(second)
    for pid, stored in second.items():
        messages = next(r["messages"] for r in ROWS if r["id"] == pid)
        one_go = _one_go(server, messages, AGAIN)
        assert one_go["ids"][:NEW] == list(stored), f"{server.kind}: {pid}'s two parts"
        ((content, reasoning, continued_from),) = db_rows(
            tmp_path, "SELECT content, reasoning_content, continued_from FROM prompts "
            "WHERE id = ?", pid)
        assert continued_from == NEW
        assert (content, reasoning or "") == (one_go["content"], one_go["reasoning"]), \
            f"{server.kind}: {pid}'s text after three parts"
        parts = db_rows(tmp_path, "SELECT parts FROM answer_tokens WHERE prompt_id = ?", pid)
        assert parts in ([], [(3,)])
