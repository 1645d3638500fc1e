"""SGLang's native POST /generate and POST /abort_request: shapes, request ids, aborts.

Part of the simulator's fidelity tests (test_sglang_fidelity_*.py): each test is one fact
read from SGLang 0.5.23's own source, its docstring naming the file (path under `sglang/`);
every test runs the real simulator process (`python -m supervisor.sim`) on loopback.
"""

from __future__ import annotations

import threading

import httpx

from tests.fixtures.waiting import wait_until
from tests.sim.sglang_calls import THINK, chat, get


def _generate(base: str, **body) -> httpx.Response:
    return httpx.post(base + "/generate", json=body, timeout=60, trust_env=False)


def _wait_running(base: str, running: int, queued: int = 0) -> None:
    def counts() -> tuple[int, int]:
        state = get(base, "/sim/state").json()
        return state["running"], state["queued"]
    wait_until(lambda: counts() == (running, queued), f"{running} running and {queued} queued",
               timeout_s=8.0, poll_s=0.02, seen=lambda: f"(running, queued) {counts()}")


def test_generate_shape_and_default_max_new_tokens(sim_server):
    """sglang/srt/entrypoints/http_server.py /generate → {text, output_ids, meta_info};
    meta_info keys from sglang/srt/managers/tokenizer_manager.py _handle_batch_output;
    max_new_tokens defaults to 128 (sglang/srt/sampling/sampling_params.py); finish_reason is
    FINISH_LENGTH.to_json() {"type": "length", "length": N}
    (sglang/srt/managers/schedule_batch.py)."""
    sim = sim_server("--sim-instant")
    out = _generate(sim.base_url, text="Once upon a time", rid="r-1").json()
    meta = out["meta_info"]
    assert set(out) == {"text", "output_ids", "meta_info"}
    assert meta["id"] == "r-1" and len(out["output_ids"]) == meta["completion_tokens"]
    assert {"prompt_tokens", "weight_version", "num_retractions", "reasoning_tokens",
            "completion_tokens", "cached_tokens", "e2e_latency"} <= set(meta)
    if meta["finish_reason"]["type"] == "length":
        assert meta["finish_reason"] == {"type": "length", "length": 128}
    short = _generate(sim.base_url, text="Once upon a time",
                      sampling_params={"max_new_tokens": 7}).json()
    assert short["meta_info"]["finish_reason"] == {"type": "length", "length": 7}


def test_duplicate_rid_is_refused(sim_server):
    """sglang/srt/managers/tokenizer_manager.py: "Duplicate request ID detected: <rid>" for a
    rid already in flight; http_server.py answers {"error": {"message"}} with 400."""
    sim = sim_server("--sim-tokens-per-s", "20")
    t = threading.Thread(target=_generate, args=(sim.base_url,),
                         kwargs={"text": "long", "rid": "dup",
                                 "sampling_params": {"max_new_tokens": 60}})
    t.start()
    try:
        _wait_running(sim.base_url, 1)
        r = _generate(sim.base_url, text="again", rid="dup")
        assert r.status_code == 400
        assert r.json() == {"error": {"message": "Duplicate request ID detected: dup"}}
    finally:
        httpx.post(sim.base_url + "/abort_request", json={"abort_all": True}, timeout=5,
                   trust_env=False)
        t.join(timeout=30)


def test_abort_request_running_and_queued(sim_server):
    """sglang/srt/entrypoints/http_server.py /abort_request {rid, abort_all} → 200; the
    scheduler (sglang/srt/managers/scheduler.py abort_request) sets FINISH_ABORT() on a running
    request ({"type": "abort", "message": "Aborted", "status_code": null, "err_type": null},
    it keeps what it produced) and pops a queued one, which the tokenizer manager reports as
    "Abort in waiting queue" with no output."""
    sim = sim_server("--sim-tokens-per-s", "20", "--max-running-requests", "1")
    results: dict[str, dict] = {}

    def run(rid: str) -> None:
        results[rid] = _generate(sim.base_url, text=f"prompt {rid}", rid=rid,
                                 sampling_params={"max_new_tokens": 400}).json()

    threads = [threading.Thread(target=run, args=(rid,)) for rid in ("run-a", "queued-b")]
    threads[0].start()
    _wait_running(sim.base_url, 1)
    threads[1].start()
    _wait_running(sim.base_url, 1, 1)
    for rid in ("queued-b", "run-a"):
        r = httpx.post(sim.base_url + "/abort_request", json={"rid": rid}, timeout=5,
                       trust_env=False)
        assert r.status_code == 200 and r.content == b""
    for t in threads:
        t.join(timeout=30)
    running, queued = results["run-a"]["meta_info"], results["queued-b"]["meta_info"]
    assert running["finish_reason"] == {"type": "abort", "message": "Aborted",
                                        "status_code": None, "err_type": None}
    assert 0 < running["completion_tokens"] < 400
    assert queued["finish_reason"] == {"type": "abort", "message": "Abort in waiting queue"}
    assert queued["completion_tokens"] == 0 and results["queued-b"]["text"] == ""


def test_abort_unknown_rid_is_ignored_and_prefix_aborts_the_family(sim_server):
    """sglang/srt/managers/tokenizer_manager.py abort_request: a rid not in flight is ignored
    (one tokenizer worker); the scheduler then aborts every request whose rid starts with
    it (req.rid.startswith(recv_req.rid))."""
    sim = sim_server("--sim-tokens-per-s", "20")
    results: dict[str, dict] = {}

    def run(rid: str) -> None:
        results[rid] = _generate(sim.base_url, text=rid, rid=rid,
                                 sampling_params={"max_new_tokens": 200}).json()

    threads = [threading.Thread(target=run, args=(rid,)) for rid in ("job", "job-2", "other")]
    for t in threads:
        t.start()
    _wait_running(sim.base_url, 3)
    httpx.post(sim.base_url + "/abort_request", json={"rid": "jo"}, timeout=5, trust_env=False)
    threading.Event().wait(0.2)
    assert get(sim.base_url, "/sim/state").json()["running"] == 3       # "jo": not in flight
    httpx.post(sim.base_url + "/abort_request", json={"rid": "job"}, timeout=5, trust_env=False)
    threads[0].join(timeout=30)
    threads[1].join(timeout=30)
    assert results["job"]["meta_info"]["finish_reason"]["type"] == "abort"
    assert results["job-2"]["meta_info"]["finish_reason"]["type"] == "abort"
    httpx.post(sim.base_url + "/abort_request", json={"abort_all": True}, timeout=5,
               trust_env=False)
    threads[2].join(timeout=30)
    assert results["other"]["meta_info"]["finish_reason"]["type"] == "abort"


def test_chat_rid_is_the_response_id_and_abort_ends_it_with_abort(sim_server):
    """sglang/srt/entrypoints/openai/protocol.py ChatCompletionRequest.rid becomes the request
    id (the response's id); an /abort_request'ed chat completion answers 200 with
    finish_reason "abort" (a graceful abort has no status_code,
    sglang/srt/managers/tokenizer_manager.py _handle_abort_finish_reason)."""
    sim = sim_server("--sim-tokens-per-s", "20", "--reasoning-parser", "qwen3")
    out: dict[str, httpx.Response] = {}
    t = threading.Thread(target=lambda: out.setdefault("r", chat(
        sim.base_url, "Tell me a long story.", max_tokens=2000, rid="chat-7", **THINK)))
    t.start()
    _wait_running(sim.base_url, 1)
    httpx.post(sim.base_url + "/abort_request", json={"rid": "chat-7"}, timeout=5,
               trust_env=False)
    t.join(timeout=30)
    body = out["r"].json()
    assert out["r"].status_code == 200 and body["id"] == "chat-7"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "abort" and choice["matched_stop"] is None
    assert 0 < body["usage"]["completion_tokens"] < 2000
