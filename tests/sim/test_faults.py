"""Each of SGLang's ways of failing, observed from outside the process the way the daemon
observes it: exit status, signal, stderr, probes that time out, requests that never end."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import psutil
import pytest

from tests.fixtures.sim_servers import SimServer
from tests.fixtures.waiting import wait_until

CHAT = {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 20,
        "separate_reasoning": True}


def _wait_exit(sim: SimServer, timeout_s: float = 15) -> int:
    try:
        return sim.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"simulated server still running after {timeout_s} s")


def _fault(sim: SimServer, **body) -> httpx.Response:
    return httpx.post(sim.base_url + "/sim/fault", json=body, timeout=5, trust_env=False)


def _group_members(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return out


def _wait_group_empty(pgid: int, timeout_s: float = 10) -> list[int]:
    wait_until(lambda: not _group_members(pgid), f"process group {pgid} to empty", timeout_s,
               seen=lambda: f"members {_group_members(pgid)}")
    return _group_members(pgid)


def test_crash_at_runtime_logs_the_traceback_then_dies_by_sigkill_with_its_tree(sim_server):
    sim = sim_server("--sim-instant", "--sim-children", "2")
    assert _fault(sim, fault="crash").status_code == 200
    assert _wait_exit(sim) == -signal.SIGKILL         # SGLang kills its own tree, itself too
    log = sim.log_text()
    assert "Scheduler hit an exception: Traceback (most recent call last)" in log
    assert "SimulatedCrash" in log
    assert log.index("Scheduler hit an exception") < log.index("SIGQUIT received.")
    assert _wait_group_empty(sim.proc.pid) == []      # it took its children down with it


def test_crash_while_loading_when_started_with_the_fault(sim_server):
    sim = sim_server("--sim-fault", "crash", "--sim-startup-s", "0.4", wait=False)
    assert _wait_exit(sim) == -signal.SIGKILL
    log = sim.log_text()
    assert "Scheduler hit an exception" in log and "fired up" not in log
    assert "Received sigquit from a child process. It usually means the child failed." in log


def test_oom_logs_sglangs_lines_then_dies_by_sigkill_with_its_tree(sim_server):
    sim = sim_server("--sim-instant", "--sim-children", "2")
    children = psutil.Process(sim.proc.pid).children()
    assert len(children) == 2
    assert _fault(sim, fault="oom").status_code == 200
    assert _wait_exit(sim) == -signal.SIGKILL
    log = sim.log_text()
    assert "torch.OutOfMemoryError: CUDA out of memory" in log
    assert "SIGQUIT received." in log
    assert _wait_group_empty(sim.proc.pid) == []


def test_oom_while_loading_says_not_enough_memory(sim_server):
    sim = sim_server("--sim-fault", "oom", "--sim-startup-s", "0.4", wait=False)
    assert _wait_exit(sim) == -signal.SIGKILL
    assert "Not enough memory. Please try to increase --mem-fraction-static" in sim.log_text()


def test_hang_stops_answering_anything_and_ignores_sigterm(sim_server):
    sim = sim_server("--sim-instant")
    assert _fault(sim, fault="hang").status_code == 200
    time.sleep(0.3)
    # The socket still accepts, so a probe times out rather than being refused.
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(sim.base_url + "/health", timeout=1.0, trust_env=False)
    assert sim.proc.poll() is None
    sim.proc.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        sim.proc.wait(timeout=1.5)                    # a wedged server needs SIGKILL
    os.killpg(sim.proc.pid, signal.SIGKILL)
    assert _wait_exit(sim) == -signal.SIGKILL


def test_stall_stops_streams_and_health_fails_after_20_s_without_output(sim_server):
    """A stuck scheduler: streams stop where they are, and `/health_generate` (like /health,
    `sglang/srt/entrypoints/http_server.py`:218-790) waits HEALTH_CHECK_TIMEOUT = 20 s for any
    output, then answers 503 with SGLang's error line, while /v1/models and /metrics still
    answer (they never reach the scheduler) and /server_info hangs (it asks the scheduler).
    Time scale 10: the 20 s are 2."""
    sim = sim_server("--sim-time-scale", "10", "--sim-tokens-per-s", "5", "--enable-metrics")
    with httpx.stream("POST", sim.base_url + "/v1/chat/completions", trust_env=False,
                      timeout=10, json={**CHAT, "max_tokens": 400, "stream": True}) as r:
        lines = r.iter_lines()
        assert next(l for l in lines if l.startswith("data:"))       # the role chunk
        next(l for l in lines if l.startswith("data:"))               # some text
        assert _fault(sim, fault="stall").json()["fault"] == "stall"
        started = time.monotonic()
        health = httpx.get(sim.base_url + "/health_generate", timeout=10, trust_env=False)
        assert health.status_code == 503 and time.monotonic() - started >= 1.9
        assert httpx.get(sim.base_url + "/v1/models", timeout=2,
                         trust_env=False).status_code == 200
        assert httpx.get(sim.base_url + "/metrics", timeout=2, trust_env=False).status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(sim.base_url + "/server_info", timeout=0.5, trust_env=False)
        state = httpx.get(sim.base_url + "/sim/state", timeout=2, trust_env=False).json()
        assert state["running"] == 1 and state["requests_total"] == 0   # stuck in its slot
        assert "Health check failed. Server couldn't get a response from detokenizer for " \
               "last 20 seconds." in sim.log_text()
        # Lifting the fault lets the stream go on to its end (a test can end cleanly).
        _fault(sim, fault="none")
        assert any(l == "data: [DONE]" for l in lines)
    assert httpx.get(sim.base_url + "/health_generate", timeout=10,
                     trust_env=False).status_code == 200


def test_stall_from_the_start_is_up_but_never_healthy_and_never_finishes(sim_server):
    """Stuck from readiness: the warmup is over, but the health probe's own one-token
    request gets no output, so it answers 503 after 20 s (2 at time scale 10), never 200."""
    sim = sim_server("--sim-instant", "--sim-fault", "stall", "--sim-time-scale", "10",
                     wait=False)
    for _ in range(200):
        if "The server is fired up and ready to roll!" in sim.log_text():
            break
        time.sleep(0.05)
    started = time.monotonic()
    assert httpx.get(sim.base_url + "/health_generate", timeout=10,
                     trust_env=False).status_code == 503
    assert time.monotonic() - started >= 1.9
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(sim.base_url + "/v1/chat/completions", json=CHAT, timeout=1.0,
                   trust_env=False)


def test_fault_after_n_requests_answers_the_nth_then_crashes(sim_server):
    sim = sim_server("--sim-instant", "--sim-fault", "crash", "--sim-fault-after-requests", "3")
    for _ in range(3):
        r = httpx.post(sim.base_url + "/v1/chat/completions", json=CHAT, timeout=10,
                       trust_env=False)
        assert r.status_code == 200
    assert _wait_exit(sim) == -signal.SIGKILL


def test_fault_after_seconds(sim_server):
    sim = sim_server("--sim-instant", "--sim-fault", "oom", "--sim-fault-after-s", "4")
    assert httpx.get(sim.base_url + "/health", timeout=2, trust_env=False).status_code == 200
    assert _wait_exit(sim, timeout_s=30) == -signal.SIGKILL


def test_empty_outputs_at_a_rate(sim_server):
    sim = sim_server("--sim-instant", "--sim-empty-rate", "1.0")
    msg = httpx.post(sim.base_url + "/v1/chat/completions", json=CHAT, timeout=10,
                     trust_env=False).json()["choices"][0]["message"]
    assert msg["content"] == "" and msg["reasoning_content"] is None
    assert _fault(sim, empty_rate=0.5).json()["empty_rate"] == 0.5
    empty = 0
    with httpx.Client(base_url=sim.base_url, trust_env=False, timeout=10) as client:
        for i in range(200):
            body = dict(CHAT, messages=[{"role": "user", "content": f"Prompt {i}"}])
            m = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
            empty += m["content"] == "" and m["reasoning_content"] is None
    assert 70 <= empty <= 130                        # binomial(200, 0.5): far beyond 4 sigma


def test_bad_fault_requests_are_refused_and_change_nothing(sim_server):
    sim = sim_server("--sim-instant")
    for body in ({"fault": "meltdown"}, {"empty_rate": 2}, {"empty_rate": "lots"}):
        r = _fault(sim, **body)
        assert r.status_code == 400 and r.json()["object"] == "error"
    r = httpx.post(sim.base_url + "/sim/fault", content=b"\xff\xfe", timeout=5, trust_env=False)
    assert r.status_code == 400
    state = httpx.get(sim.base_url + "/sim/state", timeout=2, trust_env=False).json()
    assert state["fault"] == "none" and state["empty_rate"] == 0.0


def test_sigterm_stops_cleanly_with_the_children(sim_server):
    sim = sim_server("--sim-instant", "--sim-children", "2")
    sim.proc.send_signal(signal.SIGTERM)
    # uvicorn shuts down gracefully, then re-raises the signal: died of SIGTERM, cleanly.
    assert _wait_exit(sim) in (0, -signal.SIGTERM)
    assert _wait_group_empty(sim.proc.pid) == []


def test_sigkill_of_the_leader_alone_leaves_its_children_behind(sim_server):
    """The stray a supervisor must clean up: why the daemon signals the whole group."""
    sim = sim_server("--sim-instant", "--sim-children", "2")
    os.kill(sim.proc.pid, signal.SIGKILL)
    _wait_exit(sim)
    time.sleep(0.2)
    left = _group_members(sim.proc.pid)
    assert len(left) == 2
    os.killpg(sim.proc.pid, signal.SIGKILL)
    assert _wait_group_empty(sim.proc.pid) == []
