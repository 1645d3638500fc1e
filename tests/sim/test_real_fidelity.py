"""Facts the simulator claims, each held to the real SGLang 0.5.23 CPU server with the same
test body (tests/fixtures/real_sglang.py: both launched with SHARED_FLAGS: a 1,024-token KV
pool, context 2048, --stream-interval 4, --reasoning-parser qwen3, --enable-metrics). The
real half is marked `real_sglang` and `slow`, and skips loudly where the CPU server is not
set up. The real model is random weights: tests read shapes, counts and status codes, never
text."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid

import httpx
import psutil
import pytest

from tests.fixtures.real_sglang import FidelityServer, client
from tests.fixtures.waiting import wait_until
from tests.sim.sglang_calls import families

POOL = 1024                       # SHARED_FLAGS' --max-total-tokens
# The real server takes ~20 s to start (more on a loaded machine) and decodes at ~10 tok/s.
pytestmark = pytest.mark.timeout(600)


def _body(server: FidelityServer, content: str = "hi", **extra) -> dict:
    return {"model": server.model, "messages": [{"role": "user", "content": content}],
            **extra}


def _events(response: httpx.Response) -> list[dict | str]:
    out: list[dict | str] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def _stream(server: FidelityServer, **body) -> tuple[int, list[dict | str]]:
    with client() as c, c.stream("POST", server.base_url + "/v1/chat/completions",
                                 json=_body(server, stream=True, **body)) as r:
        return r.status_code, _events(r)


def _sample(server: FidelityServer, name: str) -> float | None:
    with client() as c:
        fams = families(c.get(server.base_url + "/metrics").text)
    fam = fams.get(name)
    return None if fam is None else sum(s.value for s in fam.samples
                                        if not s.name.endswith("_created"))


def test_server_info_reports_dp_sizes_and_the_unset_running_limit(
        fidelity_server: FidelityServer):
    """`srt/server_args.py` resolved_dict carries dp_size and attn_dp_size
    (`srt/arg_groups/fields/parallel.py`:73,81). Without --max-running-requests the flag is
    reported as null, and the scheduler's own limit per DP rank
    (`srt/mem_cache/kv_cache_configurator.py` resolve_max_num_reqs: clamp(pool / context *
    512, 2048, 4096), then at most half the pool) is far above what the KV pool admits."""
    with client() as c:
        info = c.get(fidelity_server.base_url + "/server_info").json()
    assert info["dp_size"] == 1 and info["attn_dp_size"] == 1
    assert info["max_running_requests"] is None
    assert info["max_total_num_tokens"] == POOL
    assert info["max_req_input_len"] == min(2048 - 1, POOL - 1) - 5
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == POOL // 2


def test_stream_interval_sends_the_first_token_then_every_n(fidelity_server: FidelityServer):
    """`srt/managers/scheduler_components/output_streamer.py`:444-469: with
    --stream-interval 4, the first token at once, then whenever 4 are unsent, then the
    rest: 9 tokens are sent at 1, 5 and 9. The first chunk is role-only, and a send whose
    tokens decode to "" (a partial UTF-8 character on the random model) sends no chunk, so
    every text chunk carries text."""
    status, events = _stream(fidelity_server, max_tokens=9, ignore_eos=True,
                             stream_options={"include_usage": True,
                                             "continuous_usage_stats": True})
    assert status == 200 and events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict) and e.get("choices")]
    assert chunks[0]["choices"][0]["delta"] == {"reasoning_content": None,
                                                "role": "assistant", "content": ""}
    texts = chunks[1:-1]
    counts = [c["usage"]["completion_tokens"] for c in texts]
    assert counts and set(counts) <= {1, 5, 9} and counts[-1] == 9
    assert counts == sorted(set(counts))
    for c in texts:
        delta = c["choices"][0]["delta"]
        assert delta.get("reasoning_content") or delta.get("content")
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_thinking_is_on_unless_the_request_turns_it_off(fidelity_server: FidelityServer):
    """Qwen3's chat template thinks when `chat_template_kwargs.enable_thinking` is not
    given; `false` turns it off (`srt/entrypoints/openai/serving_chat.py`
    _get_reasoning_from_request). Cut off at 9 tokens, a thinking answer is all reasoning."""
    with client() as c:
        url = fidelity_server.base_url + "/v1/chat/completions"
        thinking = c.post(url, json=_body(fidelity_server, max_tokens=9, ignore_eos=True))
        plain = c.post(url, json=_body(fidelity_server, max_tokens=9, ignore_eos=True,
                                       chat_template_kwargs={"enable_thinking": False}))
    assert thinking.status_code == 200 and plain.status_code == 200
    assert thinking.json()["usage"]["reasoning_tokens"] == 9
    assert plain.json()["usage"]["reasoning_tokens"] == 0


def test_input_over_the_scheduler_limit_streamed_is_a_200_with_an_error_chunk(
        fidelity_server: FidelityServer):
    """`srt/managers/utils.py`:270-287: an input of max_req_input_len tokens or more
    (1018 here, below the 2048 context) is aborted by the scheduler with status 400.
    Streamed, the 200 has gone out: an SSE error chunk of type BAD_REQUEST, code 400, and
    [DONE] (`serving_chat.py` _generate_chat_stream, error_aborted); unstreamed, a 400 of
    type "BadRequestError" (tokenizer_manager.py _handle_abort_finish_reason raises
    ValueError)."""
    long_prompt = "hello world " * 600    # ~1,212 tokens on the real tokenizer, ~1,800 here
    status, events = _stream(fidelity_server, content=long_prompt, max_tokens=8)
    assert status == 200 and events[-1] == "[DONE]"
    errors = [e["error"] for e in events if isinstance(e, dict) and "error" in e]
    assert len(errors) == 1
    assert errors[0]["type"] == "BAD_REQUEST" and errors[0]["code"] == 400
    assert errors[0]["message"].startswith("Input length (")
    assert "exceeds the maximum allowed length (1018 tokens)" in errors[0]["message"]
    with client() as c:
        r = c.post(fidelity_server.base_url + "/v1/chat/completions",
                   json=_body(fidelity_server, long_prompt, max_tokens=8))
    assert r.status_code == 400
    assert r.json()["type"] == "BadRequestError" and r.json()["code"] == 400
    assert "exceeds the maximum allowed length (1018 tokens)" in r.json()["message"]


def test_abort_by_rid_ends_the_stream_and_is_counted(fidelity_server: FidelityServer):
    """`srt/managers/tokenizer_manager.py` abort_request: an abort of a request in flight
    is sent to the scheduler and counted in sglang:num_aborted_requests_total
    (`srt/observability/metrics_collector.py`:1959); the stream ends with finish_reason
    "abort"."""
    rid = f"fid-{uuid.uuid4().hex[:8]}"
    before = _sample(fidelity_server, "sglang:num_aborted_requests") or 0.0
    result: dict[str, object] = {}

    def run() -> None:
        result["stream"] = _stream(fidelity_server, rid=rid, max_tokens=900, ignore_eos=True)

    t = threading.Thread(target=run)
    t.start()
    try:
        with client() as c:
            # Running: the scheduler's counters show it (the abort needs it in flight).
            wait_until(lambda: (_sample(fidelity_server, "sglang:num_running_reqs") or 0) >= 1,
                       "the request running (SGLang's num_running_reqs)", 30, poll_s=0.1)
            assert c.post(fidelity_server.base_url + "/abort_request",
                          json={"rid": rid}).status_code == 200
    finally:
        t.join(timeout=60)
    status, events = result["stream"]
    finishes = [e["choices"][0]["finish_reason"] for e in events
                if isinstance(e, dict) and e.get("choices")
                and e["choices"][0].get("finish_reason")]
    assert status == 200 and finishes == ["abort"]
    assert (_sample(fidelity_server, "sglang:num_aborted_requests") or 0.0) == before + 1


def _freeze(server: FidelityServer, frozen: bool) -> None:
    """Stop the scheduler where it is: SIGSTOP/SIGCONT to the real server's scheduler
    process (its title is sglang::scheduler), the stall fault on the simulator."""
    if server.kind == "sim":
        with client() as c:
            c.post(server.base_url + "/sim/fault", json={"fault": "stall" if frozen else "none"})
        return
    children = psutil.Process(server.proc.pid).children(recursive=True)
    schedulers = [p for p in children if "scheduler" in " ".join(p.cmdline()) + p.name()]
    assert schedulers, [p.cmdline() for p in children]
    for p in schedulers:
        p.send_signal(signal.SIGSTOP if frozen else signal.SIGCONT)


@pytest.mark.slow
def test_a_frozen_scheduler_fails_health_after_20_s_and_hangs_server_info(
        fidelity_server: FidelityServer):
    """`srt/entrypoints/http_server.py`:218-790 health_generate (/health too): the probe
    sends a one-token request and waits up to HEALTH_CHECK_TIMEOUT (20 s) for any output,
    then answers 503. Routes that never reach the scheduler (/v1/models, /metrics) still
    answer 200; /server_info asks the scheduler for its state and hangs."""
    _freeze(fidelity_server, True)
    try:
        with client() as c:
            started = time.monotonic()
            health = c.get(fidelity_server.base_url + "/health_generate", timeout=60)
            waited = time.monotonic() - started
            assert health.status_code == 503 and 19 <= waited < 40
            assert c.get(fidelity_server.base_url + "/v1/models").status_code == 200
            assert c.get(fidelity_server.base_url + "/metrics").status_code == 200
            with pytest.raises(httpx.ReadTimeout):
                c.get(fidelity_server.base_url + "/server_info", timeout=2)
    finally:
        _freeze(fidelity_server, False)
    with client() as c:
        assert c.get(fidelity_server.base_url + "/health_generate").status_code == 200


def test_a_small_kv_pool_queues_what_does_not_fit(fidelity_server: FidelityServer):
    """`srt/managers/schedule_policy.py` PrefillAdder (add_one_req :1395, check_prefill in
    `srt/mem_cache/prefill_budget.py`:128): a request is admitted only while its input and
    max new tokens fit in what the running ones leave, an `ignore_eos` request reserving
    all of its budget (ratio 1.0, :787). Six requests of ~312 prompt tokens (real tokenizer;
    ~450 here) + 40 new ones in a 1,024-token pool: two run, the rest wait in the queue with
    no output (sglang:num_queue_reqs) and run later. Each prompt differs from its first
    words: the radix cache admits a request by its uncached tokens only, so once the first
    of six identical prompts was prefilled the other five fit at once (seen in CI, where the
    first prefill ran before the others arrived, and the queue stayed 0). The six are sent
    together: clients made one by one (an SSL context each) sent them ~0.1 s apart, and on a
    quiet machine each pair finished before the next arrived (queue 0 again, in CI)."""
    results: list[object] = []
    clients = [httpx.Client(trust_env=False, timeout=300) for _ in range(6)]
    together = threading.Barrier(6)

    def run(i: int) -> None:
        try:
            body = _body(fidelity_server, f"request {i}: " + "hello world " * 150,
                         max_tokens=40, ignore_eos=True)
            together.wait(timeout=60)
            r = clients[i].post(fidelity_server.base_url + "/v1/chat/completions", json=body)
            results.append(r.json()["usage"]["completion_tokens"] if r.status_code == 200
                           else r.status_code)
        except (httpx.HTTPError, threading.BrokenBarrierError) as exc:
            results.append(repr(exc))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    seen: list[tuple[float, float]] = []
    try:
        # SGLang sets the two gauges at each prefill batch and then only every
        # decode_log_interval (40) decode steps (`srt/managers/scheduler_components/
        # metrics_reporter.py:861` and `:934`): the queue shows once the first two finish
        # and the next prefill admits two of the four waiting (seconds on a loaded CPU).
        def queued() -> bool:
            seen.append((_sample(fidelity_server, "sglang:num_running_reqs") or 0,
                         _sample(fidelity_server, "sglang:num_queue_reqs") or 0))
            return seen[-1][1] >= 1
        wait_until(queued, "a request queued (SGLang's num_queue_reqs)", 240,
                   seen=lambda: f"(running, queued) max {max(seen)}, {len(seen)} samples; "
                                f"answers {results}")
        assert max(running for running, _ in seen) <= 2, seen
    finally:
        for t in threads:
            t.join(timeout=300)
        for c in clients:
            c.close()
    assert results == [40] * 6
