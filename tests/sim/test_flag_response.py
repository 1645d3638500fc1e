"""The simulator's flag-response model (supervisor/sim/flag_response.py, README "Flag
response"), measured on real simulator processes: the throughput peak a tuner must find, the
Mamba cap it must lift, and the two OOMs it must never keep, as the daemon's classifier
reads them."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import anyio
import httpx
import pytest

from supervisor.servers.exit_classifier import ExitKind, Trigger, classify
from supervisor.sim.flag_response import MambaCap, aggregate_factor, mamba_cap
from tests.sim.sglang_calls import chat, get

PEAK = 8
BASE_TOKENS_PER_S, TIME_SCALE = 50, 20
MEMORY = ("--sim-memory-gb", "80", "--sim-weights-gb", "40")


async def _full_batch(base_url: str, n: int, max_tokens: int) -> tuple[float, float]:
    """n requests at once (one full batch of equal answers): the gauge read in the middle of
    the batch (SGLang's gen_throughput over a stretch where all n decode) and the output
    tokens per second the client got, first request to last answer."""
    tokens: list[int] = []
    gauge: list[float] = []
    async with httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=120) as client:
        async def one(i: int) -> None:
            r = await client.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": f"Explain topic {i}."}],
                "max_tokens": max_tokens, "ignore_eos": True})
            assert r.status_code == 200, r.text
            tokens.append(r.json()["usage"]["completion_tokens"])

        async def read_gauge() -> None:
            for _ in range(400):                 # until the whole batch decodes (20 s at most)
                if (await client.get("/sim/state")).json()["running"] == n:
                    break
                await anyio.sleep(0.05)
            # The first read only sets SGLang's decode-stats tick (it reads low after the
            # idle spell; a tick needs 40 decode steps, 0.2 s at 16 streams here); the second
            # covers a stretch with the whole batch decoding.
            for wait in (0.3, 0.5):
                await anyio.sleep(wait)
                info = (await client.get("/server_info")).json()
                gauge.append(info["internal_states"][0]["last_gen_throughput"])

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
            tg.start_soon(read_gauge)
        took = time.monotonic() - started
    assert tokens == [max_tokens] * n
    return gauge[-1], sum(tokens) / took


async def test_throughput_peaks_at_the_running_count_the_formula_says(sim_server):
    """--sim-batch-peak P: n streams give n (P² + 1) / (P² + n²) times one stream's speed,
    highest at n = P; at P/2 and 2P the batch makes 80% of it."""
    gauge, client = {}, {}
    for n in (PEAK // 2, PEAK, PEAK * 2):
        sim = sim_server("--sim-batch-peak", str(PEAK), "--max-running-requests", str(n),
                         "--sim-tokens-per-s", str(BASE_TOKENS_PER_S),
                         "--sim-time-scale", str(TIME_SCALE))
        gauge[n], client[n] = await _full_batch(sim.base_url, n, max_tokens=1200)
        sim.stop()
    one_stream = BASE_TOKENS_PER_S * TIME_SCALE
    for n, measured in gauge.items():
        # The gauge integrates the simulated decode exactly while the batch is full.
        assert measured == pytest.approx(one_stream * aggregate_factor(n, 0, PEAK), rel=0.05)
    # What a client sees carries HTTP and admission on top: the order holds (a 25% margin).
    assert client[PEAK] > max(client[PEAK // 2], client[PEAK * 2])


def test_mamba_cap_logs_sglangs_warning_and_server_info_reports_the_capped_value(sim_server):
    """kv_cache_configurator.py resolve_max_num_reqs: 80 slots at 5 a request hold 16 of the
    64 asked for; --max-mamba-cache-size 200 lifts the cap to 40 and the 32 asked for run."""
    capped = sim_server("--sim-mamba-slots", "80", "--max-running-requests", "64",
                        "--sim-instant")
    internal = get(capped.base_url, "/server_info").json()["internal_states"][0]
    assert internal["effective_max_running_requests_per_dp"] == 16
    assert internal["max_mamba_cache_size"] == 80
    assert ("max_running_requests is capped to 16 by the mamba state cache "
            "(max_mamba_cache_size=80, 5 state slots per request). To raise it: increase "
            "--mamba-full-memory-ratio or --max-mamba-cache-size") in capped.log_text()
    assert "max_running_requests=16," in capped.log_text()

    lifted = sim_server("--sim-mamba-slots", "80", "--max-mamba-cache-size", "200",
                        "--max-running-requests", "32", "--sim-instant")
    internal = get(lifted.base_url, "/server_info").json()["internal_states"][0]
    assert internal["effective_max_running_requests_per_dp"] == 32
    assert "capped to" not in lifted.log_text()


def test_a_pool_too_small_for_the_flag_says_so_as_sglang_does(sim_server):
    """kv_cache_configurator.py:3157: at most half the pool's tokens run; 40 of the 64."""
    sim = sim_server("--max-total-tokens", "80", "--max-running-requests", "64",
                     "--sim-instant")
    internal = get(sim.base_url, "/server_info").json()["internal_states"][0]
    assert internal["effective_max_running_requests_per_dp"] == 40
    assert ("max_running_requests was reduced from the requested 64 to 40 (per dp worker) "
            "due to the available KV cache capacity.") in sim.log_text()


async def test_the_mamba_cap_is_what_the_batch_runs(sim_server):
    sim = sim_server("--sim-mamba-slots", "30", "--sim-mamba-slots-per-req", "3",
                     "--max-running-requests", "64", "--sim-tokens-per-s", "400")
    async with httpx.AsyncClient(base_url=sim.base_url, trust_env=False, timeout=60) as client:
        async def one(i: int) -> None:
            r = await client.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": f"Question {i}"}], "max_tokens": 40})
            assert r.status_code == 200
        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(one, i)
        state = (await client.get("/sim/state")).json()
    assert state["peak_running"] == 10 and state["requests_total"] == 30


def test_kv_pool_grows_with_the_memory_fraction(sim_server):
    """(f x 80 - 40) GB at 10,000 tokens a GB; the worst-case batch limit shrinks as the
    headroom (1 - f) x 80 GB does, at 50,000 tokens a GB."""
    for fraction, pool, limit in ((0.85, 280_000, 600_000), (0.9, 320_000, 400_000)):
        sim = sim_server(*MEMORY, "--mem-fraction-static", str(fraction), "--sim-instant")
        info = get(sim.base_url, "/server_info").json()
        assert info["max_total_num_tokens"] == pool
        assert info["internal_states"][0]["memory_usage"]["kvcache"] == pytest.approx(
            fraction * 80 - 40)
        assert info["sim"]["batch_tokens_limit"] == limit
        sim.stop()


def _exit_and_log(sim, timeout_s: float = 30.0) -> tuple[int, list[str]]:
    deadline = time.monotonic() + timeout_s
    while sim.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sim.proc.returncode is not None, "the simulated server did not exit"
    return sim.proc.returncode, sim.log_text().splitlines()


@pytest.mark.parametrize("fraction, words", [
    (0.96, "Capture cuda graph failed: CUDA out of memory"),      # past the 0.95 cliff
    (0.45, "Not enough memory. Please try to increase --mem-fraction-static"),  # no KV room
])
def test_a_memory_fraction_off_the_cliff_ooms_at_load_as_the_daemon_reads_an_oom(
        sim_server, fraction, words):
    sim = sim_server(*MEMORY, "--mem-fraction-static", str(fraction), wait=False)
    returncode, lines = _exit_and_log(sim)
    assert returncode == -9                      # SGLang's launcher kills its own tree
    assert any(words in line for line in lines)
    assert "The server is fired up" not in "\n".join(lines)
    reason = classify(Trigger.EXITED, returncode, lines)
    assert reason.kind is ExitKind.OOM, reason


def test_the_first_batch_past_the_headroom_ooms_mid_serving(sim_server):
    """Headroom (1 - 0.9) x 80 = 8 GB at 625 tokens a GB: 5,000 worst-case tokens. With a
    1,000-token prefill chunk, 3 requests of ~1,020 (prompt + 1,000) fit, 4 do not."""
    sim = sim_server(*MEMORY, "--mem-fraction-static", "0.9",
                     "--sim-activation-tokens-per-gb", "625", "--chunked-prefill-size", "1000",
                     "--sim-tokens-per-s", "2000")
    assert get(sim.base_url, "/server_info").json()["sim"]["batch_tokens_limit"] == 5000
    for _ in range(3):                           # one at a time: far under the limit
        assert chat(sim.base_url, max_tokens=1000).status_code == 200

    def one(i: int) -> None:
        try:
            chat(sim.base_url, f"Question {i}", max_tokens=1000)
        except httpx.HTTPError:
            pass                                 # the server died under it
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(one, i) for i in range(4)]
        returncode, lines = _exit_and_log(sim)
        for f in futures:
            f.result(timeout=60)
    assert returncode == -9
    assert any("torch.OutOfMemoryError: CUDA out of memory" in line for line in lines)
    assert "The server is fired up and ready to roll!" in "\n".join(lines)
    reason = classify(Trigger.EXITED, returncode, lines)
    assert reason.kind is ExitKind.OOM, reason


def test_flag_response_flags_are_checked(sim_server):
    """Bad input gets one line naming the problem (exit 1 before anything starts)."""
    for flags, words in ((("--sim-batch-peak", "4", "--sim-batch-knee", "8"), "two speed models"),
                         (("--sim-weights-gb", "10"), "--sim-weights-gb needs --sim-memory-gb"),
                         (("--sim-memory-gb", "80", "--sim-weights-gb", "90"), "within [0, memory)"),
                         (("--sim-mamba-slots", "0"), "--sim-mamba-slots must be >= 1"),
                         (("--mem-fraction-static", "1.2"), "--mem-fraction-static must be within")):
        sim = sim_server(*flags, wait=False)
        returncode, lines = _exit_and_log(sim)
        assert returncode == 1 and len(lines) == 1 and words in lines[0], lines


def test_the_peak_formula_tops_at_p_and_the_knee_formula_never_falls():
    for peak in (3, 8, 64):
        totals = [aggregate_factor(n, 0, peak) for n in range(1, 4 * peak)]
        assert totals.index(max(totals)) + 1 == peak
    knee = [aggregate_factor(n, 32, 0) for n in range(1, 200)]
    assert knee == sorted(knee) and knee[-1] < 32


def test_the_mamba_ratio_follows_sglangs_rules():
    assert mamba_cap(None, 80, None, False) == MambaCap(80, 5)       # the seed's 80 -> 16
    assert mamba_cap(200, 80, None, False).cap() == 40                 # the flag wins
    assert mamba_cap(200, None, None, False).cap() == 66               # base ratio 3
    assert mamba_cap(200, 80, None, True).cap() == 200                 # no radix cache: 1
    assert mamba_cap(None, None, None, False).cap() is None            # not hybrid
