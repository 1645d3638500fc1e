"""The tuner against the simulator's flag-response model (supervisor/sim/README.md, "Flag
response") in a real job: real child processes, real SQLite, real shards.

Where the top and the cliff are is set by `--sim-*` flags, so each test knows the answer:
with `--sim-batch-peak P` the total decode speed T(n) = n b (P² + 1) / (P² + n²) peaks at
exactly n = P running requests; `--sim-oom-batch-tokens` kills the first batch whose worst
case exceeds it, `--sim-oom-fraction` any load above that memory fraction."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from supervisor.config import JobConfig
from supervisor.contract.tuning import FlagRange, TrialVerdict, TuneStartRequest, TuneState
from supervisor.job.main_loop import Job
from supervisor.servers.server_state import ServerState
from tests.fixtures.real_job import assert_every_prompt_once, query, run_job, wait_for
from tests.tune.test_tuner_in_job import ready_tuner, tuned_config

# Alone (tests/conftest.py): beside other workers the CPU-paced simulators favour the server
# with more streams, and a step past the peak measured +19% where the model gives -20%.
pytestmark = [pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(300)]
MRR = "max-running-requests"
PEAK = 32
# Twice the running requests a step: the landscape's steps are then +70% (8 -> 16), +25%
# (16 -> 32, the top) and -20% (32 -> 64), each far outside a few-second window's noise.
# Finer steps near the top would not be: T(24) is within 4% of T(32).
STEPS = (16, 32, 64)
MAX_TRIALS = 4     # the search needs 3: two kept, the step past the top rejected
# Longer windows than test_tuner_in_job.py's: +25% must clear k x the noise every time on a
# loaded machine; the stream step keeps the three servers' chunks few enough for 2 CPU cores.
WINDOWS = {"min_window_s": 4.0, "max_window_s": 10.0, "min_answers": 20, "noise_k": 1.0}
SIM = {"sim-stream-step": 64}


async def test_search_over_running_requests_finds_the_peak(tmp_path: Path) -> None:
    prompts = 3000
    cfg = tuned_config(tmp_path / "job", prompts, servers=3, max_trials=MAX_TRIALS,
                       long_batch=False, **WINDOWS)
    cfg = _with_flags(cfg, {**SIM, "sim-batch-peak": PEAK})
    seen: dict[str, Any] = {}

    async def drive(job: Job) -> None:
        fleet, tuner, tg = await ready_tuner(job)
        space = (FlagRange(MRR, STEPS),)
        await tuner.start(TuneStartRequest(space=space, server="gpu0", force=True), "test", tg)
        await wait_for(lambda: not tuner.running, "the search to end", timeout_s=200)
        seen["tuning"] = tuner.tuning()
        seen["flags"] = {s.name: fleet.flags(s.name) for s in fleet.own_servers}
        seen["states"] = {s.name: s.state for s in fleet.own_servers}
        seen["max_running"] = {x.name: x.max_running for x in fleet.snapshot()}

    job, result = await run_job(cfg, drive, timeout_s=240)
    tuning = seen["tuning"]
    figures = [(t.changed, t.verdict, t.gain, t.noise, t.answers, t.window_s)
               for t in tuning.trials]
    assert tuning.state is TuneState.DONE, (tuning.reason, figures)
    assert len(tuning.trials) <= 3, figures
    assert [(t.changed, t.verdict) for t in tuning.trials] == [
        (f"{MRR} 8 -> 16", TrialVerdict.KEPT), (f"{MRR} 16 -> 32", TrialVerdict.KEPT),
        (f"{MRR} 32 -> 64", TrialVerdict.REJECTED)], figures
    # The model's own figures, measured: +70% and +25% kept, the step past the top a loss.
    kept_gain = (1 + (tuning.trials[0].gain or 0)) * (1 + (tuning.trials[1].gain or 0)) - 1
    assert kept_gain > 0.5 and (tuning.trials[2].gain or 0) < 0, figures
    # Promoted: the top in force on every server, each READY and running that many.
    assert {n: f[MRR] for n, f in seen["flags"].items()} == {f"gpu{i}": PEAK for i in range(3)}
    assert set(seen["states"].values()) == {ServerState.READY}
    assert set(seen["max_running"].values()) == {PEAK}
    kept = query(cfg, f"SELECT server, json_extract(flags, '$.{MRR}') FROM tune_flags "
                      "ORDER BY server")
    assert kept == [(f"gpu{i}", PEAK) for i in range(3)]
    assert_every_prompt_once(cfg, result, prompts)


async def test_candidates_past_the_memory_cliff_fail_and_are_never_kept(tmp_path: Path) -> None:
    prompts = 1500
    # A batch's worst case is Σ (prompt + max tokens) over its running requests (the prefill
    # chunk off): 16 of the demo's prompts at 256 tokens fit under this, 48 do not.
    cfg = tuned_config(tmp_path / "job", prompts, servers=2, max_trials=4, long_batch=True,
                       **WINDOWS)
    cfg = _with_flags(cfg, {**SIM, "chunked-prefill-size": -1, "sim-oom-batch-tokens": 12000,
                            "sim-memory-gb": 80, "sim-oom-fraction": 0.95})
    seen: dict[str, Any] = {}

    async def drive(job: Job) -> None:
        fleet, tuner, tg = await ready_tuner(job)
        # Twice the slots (kept: no batch penalty here), then three times that (its first
        # full batch OOMs), then a memory fraction past the cliff (OOM while loading).
        space = (FlagRange(MRR, (16, 48)), FlagRange("mem-fraction-static", (0.97,)))
        await tuner.start(TuneStartRequest(space=space, server="gpu0", force=True), "test", tg)
        await wait_for(lambda: not tuner.running, "the search to end", timeout_s=200)
        seen["tuning"] = tuner.tuning()
        seen["gpu0"] = fleet.servers["gpu0"].snapshot()
        seen["flags"] = {s.name: fleet.flags(s.name) for s in fleet.own_servers}

    job, result = await run_job(cfg, drive, timeout_s=240)
    tuning = seen["tuning"]
    figures = [(t.changed, t.verdict, t.reason, t.gain, t.noise) for t in tuning.trials]
    assert tuning.state is TuneState.DONE, (tuning.reason, figures)
    assert [(t.changed, t.verdict) for t in tuning.trials] == [
        (f"{MRR} 8 -> 16", TrialVerdict.KEPT), (f"{MRR} 16 -> 48", TrialVerdict.FAILED),
        ("mem-fraction-static - -> 0.97", TrialVerdict.FAILED)], figures
    assert "out of memory" in (tuning.trials[1].reason or ""), figures
    assert "out of memory at start" in (tuning.trials[2].reason or ""), figures
    # Neither failure kept anywhere: the canary back on the best flags, READY, its crashes
    # counted toward nothing; the best (16) promoted without either.
    for name, flags in seen["flags"].items():
        assert flags[MRR] == 16 and "mem-fraction-static" not in flags, (name, flags)
    assert seen["gpu0"].state is ServerState.READY
    assert seen["gpu0"].failures_in_window == 0
    assert query(cfg, "SELECT verdict FROM tune_trials ORDER BY id") == [
        ("kept",), ("failed",), ("failed",)]
    assert query(cfg, f"SELECT server, json_extract(flags, '$.{MRR}'), "
                      "json_extract(flags, '$.mem-fraction-static') FROM tune_flags "
                      "ORDER BY server") == [("gpu0", 16, None), ("gpu1", 16, None)]
    assert_every_prompt_once(cfg, result, prompts)


def _with_flags(cfg: JobConfig, flags: dict[str, Any]) -> JobConfig:
    """The config with these simulator/SGLang flags added to every server's."""
    servers = replace(cfg.servers, flags={**cfg.servers.flags, **flags})
    return replace(cfg, servers=servers)
