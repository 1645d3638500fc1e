"""Against the real, unmodified SGLang 0.5.23 server on this CPU-only machine
(../shared/tools/sglang-cpu: a tiny random-weight Qwen2 model, ~20 s to healthy, slow
decode), not the simulator:

- the saturation guard on a real job: 12 allowed, 700 max tokens, a 4096-token KV pool.
  SGLang's scheduler admits by reserved tokens, so it runs fewer than 12 and queues the rest
  with its pool far from full; the guard must settle at what it runs, never spiral below it
  (the fault this module was written for: 12 -> 7 -> 6 -> 5 -> 4 at 28-32% KV usage);
- the scheduler's length refusal, streamed: HTTP 200 and one error chunk
  (sglang/srt/managers/utils.py:283 validate_input_length; serving_chat.py:2568-2578), which
  must fail the prompt for good at its first attempt, never be retried.

A minimal start/stop helper lives here for now (tests/fixtures/real_sglang.py is being
written beside it); at most one server at a time, stopped by process group.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from supervisor.job.main_loop import Job
from supervisor.servers.endpoint import Endpoint
from supervisor.sglang.chat_request import request_body
from tests.fixtures import dispatching as dfx
from tests.fixtures.ports import free_port
from tests.fixtures.real_job import job_config, query, run_job, wait_fleet

SGLCPU = Path(os.environ.get("SGLCPU_DIR", "/var/tmp/sglang-cpu"))
PYTHON = SGLCPU / "venv" / "bin" / "python"
MODEL = SGLCPU / "tiny"
# What sglang-cpu's header says a launcher needs on a CPU-only machine.
CPU_FLAGS: dict[str, Any] = {"device": "cpu", "attention-backend": "torch_native",
                             "sampling-backend": "pytorch", "mem-fraction-static": 0.1,
                             # an idle scheduler spins a core otherwise (real_sglang.py)
                             "sleep-on-idle": True}
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}

STARTUP_S = 600          # ~20 s alone; minutes on two cores shared with other test runs

pytestmark = [pytest.mark.real_sglang, pytest.mark.slow, pytest.mark.timeout(1200)]


def _need_sglang() -> None:
    if not (PYTHON.exists() and MODEL.exists()):
        pytest.skip(f"REAL SGLANG NOT RUN: {SGLCPU} has no venv/bin/python or tiny model "
                    f"(set it up with ../shared/tools/sglang-cpu setup && ... model)")


def _argv(port: int, flags: dict[str, Any]) -> list[str]:
    argv = [str(PYTHON), "-m", "sglang.launch_server", "--model-path", str(MODEL),
            "--host", "127.0.0.1", "--port", str(port)]
    for name, value in {**CPU_FLAGS, **flags}.items():
        argv += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return argv


@asynccontextmanager
async def real_sglang(tmp_path: Path, **flags: Any) -> AsyncIterator[str]:
    """One real SGLang server on a free loopback port until the block ends; its base URL."""
    _need_sglang()
    port = free_port()
    log_path = tmp_path / "sglang.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(_argv(port, flags), stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **CPU_ENV}, start_new_session=True,
                                stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            with anyio.fail_after(STARTUP_S):
                while True:
                    if proc.poll() is not None:
                        raise AssertionError(f"SGLang exited {proc.returncode} while "
                                             f"starting: {log_path.read_text()[-2000:]}")
                    try:
                        resp = await client.get(url + "/health_generate", timeout=30)
                        if resp.status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    await anyio.sleep(0.5)
        yield url
    finally:
        await anyio.to_thread.run_sync(_stop, proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The whole process group: SGLang forks its scheduler and detokenizer."""
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


async def test_a_prompt_over_the_kv_pool_is_refused_streamed_and_failed_for_good(
        tmp_path: Path) -> None:
    """A 1024-token KV pool under a 2048-token context: a ~1,400-token prompt passes the
    tokenizer's context check and is refused by the scheduler's (max_req_input_len =
    min(context - 1, pool - 1) - 5 = 1018, sglang/srt/managers/tp_worker.py), which a
    stream answers with HTTP 200 and an error chunk of code 400."""
    long_text = "hello world " * 700
    rows = [{"id": "long", "messages": [{"role": "user", "content": long_text}]}]
    rows += [{"id": f"short{i}", "messages": [{"role": "user", "content": f"Say {i}."}]}
             for i in range(3)]
    async with real_sglang(tmp_path, **{"max-total-tokens": 1024,
                                        "context-length": 2048}) as url:
        cfg = dfx.job_config(tmp_path, servers={"flags": {"reasoning-parser": None}},
                             generation={"max_tokens": 16, "enable_thinking": False},
                             dispatch={"max_attempts": 3, "request_timeout_s": 120.0})
        assert cfg.dispatch.stream
        # The wire form first, as SGLang sends it to the daemon's request.
        body = request_body(cfg.job.model, rows[0]["messages"], cfg.generation, 16, rid="x1")
        async with httpx.AsyncClient(trust_env=False) as client:
            resp = await client.post(url + "/v1/chat/completions", json=body, timeout=120)
        assert resp.status_code == 200
        chunks = [line for line in resp.text.splitlines() if line.startswith("data:")]
        err = json.loads(chunks[0].removeprefix("data:"))["error"]
        assert (err["type"], err["code"]) == ("BAD_REQUEST", 400)
        assert "exceeds the maximum allowed length (1018 tokens)" in err["message"]
        assert chunks[-1] == "data: [DONE]"

        store = dfx.open_store(tmp_path, rows)
        try:
            async with dfx.dispatching(store, cfg) as (d, astore):
                await dfx.serve_until(d, astore, Endpoint("gpu0", url, 2),
                                      lambda c: c.done + c.failed == len(rows), timeout_s=240)
                snap = d.snapshot()
        finally:
            store.close()
    [(status, attempts, error)] = dfx.db_rows(
        tmp_path, "select status, attempts, error from prompts where id = 'long'")
    # Failed for good at its first attempt, with SGLang's own message; the rest answered.
    assert (status, attempts) == ("failed", 1)
    assert "Input length (" in error and "exceeds the maximum allowed length" in error
    assert dfx.db_rows(tmp_path, "select count(*) from prompts where status = 'done'") == [(3,)]
    # Its own kind in the breaker's window, not a systemic "HTTP 400"; the breaker shut.
    assert snap.breaker.errors_by_kind == {"context-length refusal": 1}
    assert snap.breaker.tripped is None and not snap.paused


async def test_the_guard_settles_at_what_sglang_runs_on_a_loaded_server(
        tmp_path: Path) -> None:
    """The real job at 12 allowed and 700 max tokens on a 4096-token pool."""
    _need_sglang()
    command = [str(PYTHON), "-m", "sglang.launch_server"]
    flags: dict[str, Any] = {**CPU_FLAGS, "max-running-requests": 12,
                             "max-total-tokens": 4096, "context-length": 2048,
                             # the fixture's simulator flags, off for real SGLang
                             "sim-tokens-per-s": None, "sim-time-scale": None,
                             "sim-startup-s": None}
    # Enough prompts to outlast the two minutes sampled on a quiet machine too (200 did not).
    cfg = job_config(tmp_path, servers=1, prompts=1000, flags=flags, command=command,
                     model_path=str(MODEL), startup_timeout_s=STARTUP_S, health_interval_s=1.0,
                     health_timeout_s=30.0, hang_timeout_s=300.0)
    cfg = replace(cfg, generation=replace(cfg.generation, max_tokens=700),
                  # stop_grace_s 0: at the end, requeue at once rather than wait minutes for
                  # 700-token answers on a CPU.
                  dispatch=replace(cfg.dispatch, saturation_calm_s=30.0, saturation_floor=2,
                                   stop_grace_s=0.0))
    samples: list[tuple[float, int, int | None, int | None, float | None, int]] = []

    async def drive(job: Job) -> None:
        fleet = await wait_fleet(job)
        assert job.dispatcher is not None
        d = job.dispatcher
        with anyio.fail_after(STARTUP_S + 30):
            while d.inflight_limit("gpu0") is None:
                await anyio.sleep(0.2)
        t0 = anyio.current_time()
        # Two minutes of a loaded server (bounded: 240 samples of 0.5 s).
        for _ in range(240):
            lim = d.inflight_limit("gpu0")
            v = fleet.servers["gpu0"].ready.sglang.view
            samples.append((anyio.current_time() - t0, lim.limit if lim else -1, v.running,
                            v.queued, v.token_usage, d.progress("gpu0").in_flight))
            await anyio.sleep(0.5)
        job.request_stop("test over")

    _, result = await run_job(cfg, drive, timeout_s=STARTUP_S + 400,
                              base_env={**os.environ, **CPU_ENV})
    assert result.reason == "stopped by test over"
    moves = [json.loads(d) for (d,) in query(
        cfg, "SELECT detail FROM events WHERE kind = 'inflight_limit' AND subject = 'gpu0' "
             "ORDER BY id")]
    running = [r for _, _, r, _, _, _ in samples if r is not None]
    usage = [u for _, _, _, _, u, _ in samples if u is not None]
    queued = [q for _, _, _, q, _, _ in samples if q is not None]
    report = "\n".join(f"{t:6.1f}s limit {lim:2d} running {r} queued {q} KV {u} in flight {f}"
                       for t, lim, r, q, u, f in samples[::4])
    moves_text = "\n".join(f"{m['from']} -> {m['to']}: {m['reason']}" for m in moves)
    print(report + "\n" + moves_text)
    assert running and usage, report
    # The premise: SGLang ran fewer than 12 and queued the rest (its scheduler admits by the
    # tokens a request may need, 0.7 x 700 each, not by what it uses).
    assert max(queued) >= 2 and min(running) < 12, report
    downs = [m for m in moves if m["to"] < m["from"]]
    # Never for a "collapse" its own cut made (fewer requests decode less in all, which is
    # not a collapse). A collapse after a calm raise is the CPU server's real slowdown on a
    # loaded machine (CI: 30% of the peak per request at 12 in flight, KV 93% full) and is
    # cut like any other sign. One straight after a cut must compare like with like: its
    # peak per request measured at no more requests than it runs now, so the cut cannot
    # explain it. (Here: 12 -> 8 for a queue, then each of the 8 decoding at 46% of what
    # each of 8 did a minute before, as their contexts grew toward 700 tokens on a CPU.)
    same_load = re.compile(r"over (\d+) requests in flight.*\(\d+ tok/s over (\d+)\)")
    for before, m in zip([None, *moves], moves, strict=False):
        if m["to"] < m["from"] and "collapsed" in m["reason"] and before is not None \
                and before["to"] < before["from"]:
            now, at_peak = map(int, same_load.search(m["reason"]).groups())  # type: ignore[union-attr]
            assert at_peak <= now, moves_text
    for m in downs:
        # Never a step below what SGLang ran while its pool had room: to the running count
        # for a held queue, or a step for retractions once the pool really filled (700-token
        # answers outgrow 4096 tokens).
        assert (f"to the {m['to']} SGLang runs" in m["reason"] or "retracting" in m["reason"]
                or "KV pool full" in m["reason"]
                # a cut at most halves: 12 -> 6 while SGLang ran 5 with room
                or f"to {m['to']}, half of {m['from']}" in m["reason"]), moves_text
    queue_cuts = [m for m in downs if "queue" in m["reason"]]
    # No spiral: one cut answers a queue; another only after the first has drained.
    assert len(queue_cuts) <= 2, moves_text
    # Never below what SGLang ran while its pool had room, but for a poll's lag: a limit
    # under the running count is taken back to it at the guard's next poll.
    late = samples[len(samples) // 2:]
    under = [(t, lim, r) for t, lim, r, _, u, _ in late
             if r is not None and u is not None and u < 0.9 and lim < r]
    assert len(under) <= 3, (under, report)
