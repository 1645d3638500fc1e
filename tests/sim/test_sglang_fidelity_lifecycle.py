"""The server's life as SGLang's: /server_info, startup (port closed, 503 in warmup, 200), the
way it fails, data parallelism.

Part of the simulator's fidelity tests (test_sglang_fidelity_*.py): each test is one fact
read from SGLang 0.5.23's own source, its docstring naming the file (path under `sglang/`);
every test runs the real simulator process (`python -m supervisor.sim`) on loopback.
"""

from __future__ import annotations

import signal
import threading

import httpx
import pytest

from tests.sim.sglang_calls import THINK, chat, families, get


def test_server_info_effective_max_running_requests_from_flag(sim_server):
    """sglang/srt/managers/scheduler_components/internal_state.py: each internal state
    carries effective_max_running_requests_per_dp = scheduler.max_running_requests, which
    sglang/srt/mem_cache/kv_cache_configurator.py resolve_max_num_reqs takes from the flag
    (capped at half the KV pool)."""
    sim = sim_server("--sim-instant", "--max-running-requests", "48")
    info = get(sim.base_url, "/server_info").json()
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 48
    assert info["max_running_requests"] == 48


def test_server_info_effective_max_running_requests_without_flag(sim_server):
    """sglang/srt/mem_cache/kv_cache_configurator.py resolve_max_num_reqs: with no
    --max-running-requests, pool / context_len * 512 clamped to [2048, 4096] (and at most
    half the pool); the top-level max_running_requests stays null (the raw flag)."""
    sim = sim_server("--sim-instant", "--context-length", "32768")
    info = get(sim.base_url, "/server_info").json()
    pool = info["max_total_num_tokens"]
    expected = min(max(min(int(pool / 32768 * 512), 4096), 2048), pool // 2)
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == expected
    assert info["max_running_requests"] is None


def test_server_info_effective_max_running_requests_capped_by_mamba_cache(sim_server):
    """sglang/srt/mem_cache/kv_cache_configurator.py resolve_max_num_reqs: a hybrid (mamba)
    model caps it at max_mamba_cache_size // 3 (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO)."""
    sim = sim_server("--sim-instant", "--max-running-requests", "100",
                     "--max-mamba-cache-size", "200")
    info = get(sim.base_url, "/server_info").json()
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 66


def test_server_info_version_and_shape(sim_server):
    """sglang/srt/entrypoints/http_server.py server_info: server args at top level plus
    internal_states (one per DP rank), version and frontend "python"."""
    sim = sim_server("--sim-instant")
    info = get(sim.base_url, "/server_info").json()
    assert info["version"] == "0.5.23 (simulated)"
    assert info["frontend"] == "python"
    assert isinstance(info["internal_states"], list) and len(info["internal_states"]) == 1
    assert "last_gen_throughput" in info["internal_states"][0]


def test_port_refuses_connections_while_loading_then_503_in_warmup_then_200(sim_server):
    """sglang/srt/entrypoints/http_server.py launch_server: uvicorn starts only after the
    scheduler has loaded the model (port closed meanwhile); health_generate answers 503 while
    the status is Starting (the warmup request runs), then 200 once Up."""
    sim = sim_server("--sim-startup-s", "2", wait=False)
    seen: list[object] = []
    for _ in range(400):
        try:
            code = httpx.get(sim.base_url + "/health_generate", timeout=5,
                             trust_env=False).status_code
        except httpx.ConnectError:
            code = "refused"
        if not seen or seen[-1] != code:
            seen.append(code)
        if code == 200:
            break
        threading.Event().wait(0.02)
    assert seen == ["refused", 503, 200]
    log = sim.log_text()
    assert log.index("max_total_num_tokens=") < log.index("The server is fired up and ready")


def test_health_generate_never_answers_200_in_under_a_second(sim_server):
    """sglang/srt/entrypoints/http_server.py health_generate: it sends a one-token request
    and sleeps 1 s before looking for output, so a probe with a timeout under 1 s never sees
    200 (and /health is the same handler)."""
    sim = sim_server("--sim-instant")
    for path in ("/health_generate", "/health"):
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(sim.base_url + path, timeout=0.5, trust_env=False)
        assert get(sim.base_url, path).status_code == 200


def test_crash_logs_scheduler_exception_then_sigquit_and_ends_by_sigkill(sim_server):
    """sglang/srt/managers/scheduler.py run_scheduler_process logs "Scheduler hit an
    exception: <traceback>" and sends SIGQUIT to the launcher; the running-phase handler
    (sglang/srt/managers/tokenizer_manager.py) logs "SIGQUIT received. signum=None,
    frame=None. It usually means one child failed." and kill_process_tree
    (sglang/srt/utils/common.py) SIGKILLs the tree, itself last: the exit is signal 9."""
    sim = sim_server("--sim-instant")
    httpx.post(sim.base_url + "/sim/fault", json={"fault": "crash"}, timeout=5, trust_env=False)
    assert sim.proc.wait(timeout=15) == -signal.SIGKILL
    log = sim.log_text()
    first = log.index("Scheduler hit an exception: Traceback (most recent call last):")
    assert first < log.index("SIGQUIT received. signum=None, frame=None. It usually means "
                             "one child failed.")


def test_retraction_lines_are_harmless(sim_server):
    """sglang/srt/managers/scheduler.py: "KV cache pool is full. Retract requests." is a
    warning; the retracted requests are queued again and finish normally."""
    sim = sim_server("--sim-fault", "retract", "--sim-time-scale", "40",
                     "--sim-tokens-per-s", "100", "--reasoning-parser", "qwen3")
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        chat(sim.base_url, f"prompt {i}", max_tokens=400, **THINK).status_code))
        for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [200] * 6
    assert "KV cache pool is full. Retract requests." in sim.log_text()
    assert sim.proc.poll() is None


def test_data_parallel_has_one_internal_state_and_slot_set_per_rank(sim_server):
    """sglang/srt/entrypoints/http_server.py server_info: internal_states is one entry per DP
    rank (each scheduler's own effective_max_running_requests_per_dp, the flag itself without
    DP attention, sglang/srt/mem_cache/kv_cache_configurator.py); the scheduler metrics gain
    a dp_rank label (sglang/srt/observability/metrics_collector.py)."""
    sim = sim_server("--sim-instant", "--dp-size", "2", "--max-running-requests", "3",
                     "--enable-metrics")
    states = get(sim.base_url, "/server_info").json()["internal_states"]
    assert [s["effective_max_running_requests_per_dp"] for s in states] == [3, 3]
    fams = families(get(sim.base_url, "/metrics").text)
    assert fams["sglang:num_running_reqs"].samples[0].labels["dp_rank"] == "0"
