"""A simulated server under KV-pool pressure (--max-total-tokens), seen from outside: what a
client and the daemon's watchdogs see of SGLang 0.5.23's queueing and retraction
(supervisor/sim/kv_pool.py has the rules and their source lines)."""

from __future__ import annotations

import json
import statistics
import threading
import time

import httpx

from tests.sim.sglang_calls import families, get

PROMPTS = [f"Tell me about river number {i}." for i in range(5)]


def _stream(base: str, content: str, out: dict, **extra) -> None:
    """One streamed chat: its text pieces and when each arrived."""
    body = {"model": "sim/test-model", "messages": [{"role": "user", "content": content}],
            "stream": True, "stream_options": {"include_usage": True}, **extra}
    pieces, times, usage = [], [], None
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60,
                      trust_env=False) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if event.get("usage") and not event["choices"]:
                usage = event["usage"]
                continue
            delta = event["choices"][0]["delta"]
            text = (delta.get("reasoning_content") or "") + (delta.get("content") or "")
            if text:
                pieces.append(text)
                times.append(time.monotonic())
    out[content] = {"pieces": pieces, "times": times, "usage": usage}


def _whole(base: str, content: str, **extra) -> str:
    body = {"model": "sim/test-model", "messages": [{"role": "user", "content": content}],
            **extra}
    message = httpx.post(base + "/v1/chat/completions", json=body, timeout=60,
                         trust_env=False).json()["choices"][0]["message"]
    return (message["reasoning_content"] or "") + (message["content"] or "")


def test_retracted_streams_go_silent_and_resume_without_losing_or_repeating_a_token(sim_server):
    """SGLang over-commits its KV pool (it reserves only new_token_ratio, 0.7, of what a
    running request may still write: schedule_policy.py:787) and, when the running requests
    outgrow it, retracts the newest back to the queue (schedule_batch.py:3451 retract_decode)
    with its output kept (reset_for_retract), logging "KV cache pool is full. Retract
    requests." (scheduler.py:4526) and counting sglang:num_retracted_requests_total. The
    client sees its stream stop for a while, then go on: the text is exactly what the
    same request gets unstreamed, nothing lost, nothing repeated."""
    sim = sim_server("--max-total-tokens", "1000", "--enable-metrics", "--stream-interval", "4",
                     "--sim-tokens-per-s", "100")
    results: dict[str, dict] = {}
    threads = [threading.Thread(target=_stream, args=(sim.base_url, p, results),
                                kwargs={"max_tokens": 300}) for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == sorted(PROMPTS)
    log = sim.log_text()
    assert "KV cache pool is full. Retract requests. #retracted_reqs: " in log
    fams = families(get(sim.base_url, "/metrics").text)
    assert fams["sglang:num_retracted_requests"].samples[0].value >= 1
    paused = 0
    for prompt, got in results.items():
        assert got["usage"]["completion_tokens"] == 300
        assert "".join(got["pieces"]) == _whole(sim.base_url, prompt, max_tokens=300)
        gaps = [b - a for a, b in zip(got["times"], got["times"][1:])]
        if max(gaps) > 5 * statistics.median(gaps):
            paused += 1                   # silent in the queue, then on from where it was
    assert paused >= 1


def test_a_full_pool_queues_requests_with_no_output_until_room_frees(sim_server):
    """PrefillAdder admits a request only when its input and budget fit
    (schedule_policy.py:1395): the rest wait in the queue (sglang:num_queue_reqs) with not
    even the role chunk sent, then run when the running ones finish."""
    sim = sim_server("--max-total-tokens", "1000", "--enable-metrics",
                     "--sim-tokens-per-s", "200")
    results: dict[str, dict] = {}
    threads = [threading.Thread(target=_stream, args=(sim.base_url, p, results),
                                kwargs={"max_tokens": 400, "ignore_eos": True})
               for p in PROMPTS]
    for t in threads:
        t.start()
    queued = None
    for _ in range(200):
        fams = families(get(sim.base_url, "/metrics").text)
        running = fams["sglang:num_running_reqs"].samples[0].value
        waiting = fams["sglang:num_queue_reqs"].samples[0].value
        if waiting >= 1:
            queued = (running, waiting)
            break
        time.sleep(0.02)
    for t in threads:
        t.join(timeout=60)
    # ignore_eos reserves its whole budget (ratio 1.0): 2 x (~10 + 400) fit in 1,000.
    assert queued is not None and queued[0] == 2
    assert all(r["usage"]["completion_tokens"] == 400 for r in results.values())
    assert "Retract requests" not in sim.log_text()
    state = get(sim.base_url, "/sim/state").json()
    assert state["peak_running"] == 2 and state["retracted_total"] == 0


def test_aborted_requests_counter_appears_only_after_the_first_abort(sim_server):
    """`sglang/srt/observability/metrics_collector.py`:1959 sglang:num_aborted_requests_total
    is labelled {model_name, engine_type} and, like every labelled counter, has no sample
    (no family) until its first abort (tokenizer_manager.py abort_request)."""
    sim = sim_server("--enable-metrics", "--sim-tokens-per-s", "20")
    assert "sglang:num_aborted_requests" not in families(get(sim.base_url, "/metrics").text)
    done: dict[str, dict] = {}
    t = threading.Thread(target=_stream, args=(sim.base_url, "abort me", done),
                         kwargs={"rid": "abort-me-1", "max_tokens": 500})
    t.start()
    for _ in range(200):
        if get(sim.base_url, "/sim/state").json()["running"] == 1:
            break
        time.sleep(0.02)
    httpx.post(sim.base_url + "/abort_request", json={"rid": "abort-me-1"}, timeout=10,
               trust_env=False)
    t.join(timeout=30)
    fam = families(get(sim.base_url, "/metrics").text)["sglang:num_aborted_requests"]
    assert [(s.labels, s.value) for s in fam.samples if s.name.endswith("_total")] == [
        ({"model_name": "sim/test-model", "engine_type": "unified"}, 1.0)]
