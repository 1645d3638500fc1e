"""Raising max tokens with continue, on a real daemon over real simulated servers: each
truncated answer is continued from its exact tokens (not decoded again), comes out as the
answer the simulator gives the same prompt at the new limit in one go, and is in the shards
once; answers with no stored tokens run again from the start, counted; a daemon SIGKILLed
while continuations run resumes them from the stored tokens."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from state.token_ids_table import unpack_ids
from supervisor.client.control_client import ControlRefused
from tests.fixtures import control_daemon as daemon
from tests.fixtures.state_db import read_db

# Daemons on simulated servers, answers of hundreds of tokens: minutes on a busy machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OLD, NEW = 256, 640


def _start(directory: Path, prompts: int = 200, **dispatch: Any) -> daemon.Daemon:
    """Thinking on (the cut falls inside the trace for most answers), one server."""
    data = daemon.config_dict(directory, servers=1, prompts=prompts,
                              flags={"reasoning-parser": "qwen3"})
    data.setdefault("dispatch", {}).update(dispatch)
    data["generation"]["enable_thinking"] = True
    data["generation"]["max_tokens"] = OLD
    data["job"]["shard_size"] = 10
    d = daemon.Daemon(daemon.spawn(directory, data), directory,
                      data["control"]["socket"], directory / "daemon.log")
    d.config = data              # type: ignore[attr-defined]
    try:
        daemon._wait_answering(d)
        d.wait_status(lambda s: all(x.state.value == "READY" for x in s.servers), "READY")
    except BaseException:
        d.stop()
        raise
    return d


def _wait(d: daemon.Daemon, sql: str, want: Any, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        got = d.query(sql)[0][0]
        if want(got):
            return
        if d.proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last {got}): "
                                 f"{d.log()[-3000:]}")
        time.sleep(0.1)


def _shard_lines(directory: Path) -> list[dict[str, Any]]:
    lines = []
    for path in sorted((directory / "shards").rglob("*.jsonl")):
        lines += [json.loads(x) for x in path.read_text().splitlines()]
    return lines


def _one_go(d: daemon.Daemon, prompt_id: str, limit: int) -> dict[str, Any]:
    """The answer the simulator gives the prompt at `limit` in one go (unstreamed)."""
    (messages,) = d.query("SELECT messages FROM prompts WHERE id = ?", prompt_id)[0]
    port = d.config["servers"]["base_port"]          # type: ignore[attr-defined]
    r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", trust_env=False, timeout=60,
                   json={"model": "sim", "messages": json.loads(messages),
                         "max_completion_tokens": limit, "separate_reasoning": True,
                         "chat_template_kwargs": {"enable_thinking": True}})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def d(tmp_path: Path) -> Iterator[daemon.Daemon]:
    running = _start(tmp_path / "job")
    yield running
    assert running.stop() == 0, running.log()[-3000:]


def test_raise_with_continue_decodes_only_past_the_old_limit(tmp_path: Path) -> None:
    directory = tmp_path / "job"
    # First unstreamed: its truncated answers bring no ids back (as an older daemon's rows):
    # they are re-run from the start, and said so.
    first = _start(directory, stream=False)
    try:
        _wait(first, "SELECT count(*) FROM prompts WHERE finish_reason = 'length'",
              lambda n: n >= 2, "truncated answers without ids")
    finally:
        assert first.stop() == 0, first.log()[-3000:]
    d = _start(directory)
    try:
        _continue_and_check(d)
    finally:
        assert d.stop() == 0, d.log()[-3000:]


def _continue_and_check(d: daemon.Daemon) -> None:
    _wait(d, "SELECT count(*) FROM answer_tokens", lambda n: n >= 6, "truncated answers")
    with d.client() as client:
        client.pause("raise max tokens")
    d.wait_status(lambda s: s.job.in_flight == 0, "nothing in flight")
    older = [r[0] for r in d.query(
        "SELECT id FROM prompts p WHERE finish_reason = 'length' AND status = 'done' AND "
        "coalesce(loop, 0) = 0 AND "
        "NOT EXISTS (SELECT 1 FROM answer_tokens t WHERE t.prompt_id = p.id)")]
    assert older
    stored = {pid: unpack_ids(blob) for pid, blob in d.query(
        "SELECT prompt_id, output_ids FROM answer_tokens")}
    truncated = d.query("SELECT count(*) FROM prompts WHERE finish_reason = 'length' "
                        "AND status = 'done'")[0][0]
    with d.client() as client:
        result = client.set_max_tokens(NEW, continue_truncated=True)
        client.resume()
    assert (result.old, result.new) == (OLD, NEW)
    assert result.continued == len(stored) and result.from_scratch == len(older)
    assert result.continued + result.from_scratch == truncated
    assert result.tokens_kept == OLD * len(stored)
    # The continued prompts are the first to go out again.
    _wait(d, "SELECT count(*) FROM prompts WHERE status = 'done' AND continued_from = "
          f"{OLD}", lambda n: n >= len(stored), "the continued answers done", 300)
    for pid, before in stored.items():
        ((content, reasoning, finish, tokens, continued_from),) = d.query(
            "SELECT content, reasoning_content, finish_reason, completion_tokens, "
            "continued_from FROM prompts WHERE id = ?", pid)
        ids = d.query("SELECT output_ids FROM answer_tokens WHERE prompt_id = ?", pid)
        assert continued_from == OLD
        one_go = _one_go(d, pid, NEW)
        message = one_go["choices"][0]["message"]
        assert (content, reasoning) == (message["content"], message["reasoning_content"])
        assert (finish, tokens) == (one_go["choices"][0]["finish_reason"],
                                    one_go["usage"]["completion_tokens"])
        if finish == "length":               # still truncated: its ids are kept, whole
            assert unpack_ids(ids[0][0])[:OLD] == before and len(unpack_ids(ids[0][0])) == NEW
    for pid in older:
        # Back to pending to run from the start (after the fresh prompts: it has had an
        # attempt), never continued.
        ((status, continued_from, max_tokens),) = d.query(
            "SELECT status, continued_from, max_tokens FROM prompts WHERE id = ?", pid)
        assert continued_from is None and (status != "done" or max_tokens == NEW)
    assert d.query("SELECT answers, tokens FROM continued_totals") == [
        (len(stored), OLD * len(stored))]
    event = json.loads(d.query("SELECT detail FROM events WHERE kind = 'continue_truncated'")
                       [0][0])
    assert (event["continued"], event["from_scratch"]) == (len(stored), len(older))
    # The requeue trigger left the continued answers out of the waste ledger.
    assert {r[0] for r in d.query("SELECT prompt_id FROM waste WHERE cause = 'requeue'")} \
        == set(older)


def test_continue_is_refused_with_the_numbers_past_the_context_length(d: daemon.Daemon) -> None:
    _wait(d, "SELECT count(*) FROM answer_tokens", lambda n: n >= 1, "a truncated answer")
    with d.client() as client:
        client.pause("no answer lands meanwhile")     # a longer prompt would change the numbers
    d.wait_status(lambda s: s.job.in_flight == 0, "nothing in flight")
    longest = d.query("SELECT max(p.prompt_tokens) FROM prompts p JOIN answer_tokens t "
                      "ON t.prompt_id = p.id")[0][0]
    with d.client() as client, pytest.raises(ControlRefused) as refused:
        client.set_max_tokens(4096 - longest + 1, continue_truncated=True)
        assert client.status().max_tokens == OLD
    assert "over the servers' context length (4,096)" in str(refused.value)
    assert f"the longest truncated prompt has {longest:,} tokens" in str(refused.value)


def test_a_daemon_killed_mid_continuation_resumes_from_the_stored_ids(tmp_path: Path) -> None:
    directory = tmp_path / "job"
    d = _start(directory, prompts=12)
    try:
        _wait(d, "SELECT count(*) FROM answer_tokens", lambda n: n >= 4, "truncated answers")
        with d.client() as client:
            client.pause("raise max tokens")     # the job must not finish before the raise
            got = client.set_max_tokens(2048, continue_truncated=True)
            client.resume()
        assert got.continued and got.continued >= 4
        stored = {pid: unpack_ids(blob) for pid, blob in d.query(
            "SELECT prompt_id, output_ids FROM answer_tokens WHERE continuing = 1")}
        # Continuations on the wire (each ~7 s at the sim's pace): kill the daemon.
        _wait(d, "SELECT count(*) FROM prompts p JOIN answer_tokens t ON t.prompt_id = p.id "
              "WHERE t.continuing = 1 AND p.status = 'in_flight'", lambda n: n >= 2,
              "continuations in flight")
    finally:
        os.killpg(d.proc.pid, signal.SIGKILL)
        d.proc.wait(timeout=10)
        d._kill_left_servers()
    assert d.query("SELECT count(*) FROM answer_tokens WHERE continuing = 1")[0][0] >= 2
    d2 = daemon.Daemon(daemon.spawn(directory, d.config), directory,  # type: ignore[attr-defined]
                       d.socket, d.log_path)
    try:
        daemon._wait_answering(d2)
        _wait(d2, "SELECT count(*) FROM prompts WHERE status = 'done'", lambda n: n == 12,
              "every prompt done", 240)
        d2.proc.wait(timeout=120)            # a finished job writes its shards and exits
    finally:
        assert d2.stop() == 0, d2.log()[-3000:]
    for pid, before in stored.items():
        ((tokens, continued_from),) = read_db(
            d2.db, "SELECT completion_tokens, continued_from FROM prompts WHERE id = ?", pid)
        assert continued_from == OLD, pid
        ids = read_db(d2.db, "SELECT output_ids FROM answer_tokens WHERE prompt_id = ?", pid)
        if ids:                              # ended `length` at 2,048: kept, whole
            assert unpack_ids(ids[0][0])[:OLD] == before
    assert read_db(d2.db, "SELECT count(*) FROM answer_tokens WHERE continuing = 1") == [(0,)]
    # Each prompt once in the output, at its final answer.
    lines = _shard_lines(directory)
    assert sorted(x["id"] for x in lines) == sorted(
        r[0] for r in read_db(d2.db, "SELECT id FROM prompts"))
    by_id = {x["id"]: x for x in lines}
    for pid in stored:
        assert by_id[pid]["continued_from"] == OLD and by_id[pid]["max_tokens"] == 2048


def test_requests_in_flight_at_the_raise_are_continued_when_they_end_truncated(
        d: daemon.Daemon) -> None:
    _wait(d, "SELECT count(*) FROM answer_tokens", lambda n: n >= 2, "truncated answers")
    _wait(d, "SELECT count(*) FROM prompts WHERE status = 'in_flight'", lambda n: n >= 4,
          "requests in flight")
    with d.client() as client:
        result = client.set_max_tokens(NEW, continue_truncated=True)
    # Sent at the old limit before the raise, they end truncated after it: continued too.
    _wait(d, "SELECT count(*) FROM prompts WHERE continued_from IS NOT NULL",
          lambda n: n >= 10, "continued answers")
    with d.client() as client:
        client.pause("look")
    d.wait_status(lambda s: s.job.in_flight == 0, "nothing in flight")
    _wait(d, "SELECT count(*) FROM prompts WHERE status = 'done' AND finish_reason = 'length' "
          f"AND max_tokens < {NEW}", lambda n: n == 0, "no answer left truncated under the "
          "new limit", 120)
    assert d.query("SELECT count(*) FROM events WHERE kind = 'continue_truncated'") == [(1,)]
    # More were continued (or are marked to be) than the raise found recorded.
    continued = d.query("SELECT count(*) FROM prompts p LEFT JOIN answer_tokens t ON "
                        "t.prompt_id = p.id WHERE p.continued_from IS NOT NULL "
                        "OR t.continuing = 1")[0][0]
    assert result.continued is not None and continued > result.continued


def test_continue_is_refused_unstreamed_where_no_ids_come_back(tmp_path: Path) -> None:
    d = _start(tmp_path / "job", stream=False)
    try:
        _wait(d, "SELECT count(*) FROM prompts WHERE finish_reason = 'length'",
              lambda n: n >= 1, "a truncated answer")
        # Unstreamed answers bring no ids: nothing is kept.
        assert d.query("SELECT count(*) FROM answer_tokens") == [(0,)]
        with d.client() as client, pytest.raises(ControlRefused) as refused:
            client.set_max_tokens(NEW, continue_truncated=True)
        assert "dispatch.stream is false" in str(refused.value)
        with d.client() as client:
            assert client.status().max_tokens == OLD
            assert client.set_max_tokens(NEW, requeue_truncated=True).requeued
    finally:
        assert d.stop() == 0, d.log()[-3000:]
