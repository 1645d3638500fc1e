"""The tuner in a real job on simulated servers (real child processes, real SQLite, real
shards): a candidate kept, one rejected, one that OOMs at start (the canary goes back to the best flags, is
not FAILED and its failure not counted), and every prompt exactly once in the shards."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from anyio.abc import TaskGroup

from supervisor.config import JobConfig, TuneSection
from supervisor.contract.tuning import FlagRange, TrialVerdict, TuneStartRequest, TuneState
from supervisor.job.main_loop import Job
from supervisor.servers.fleet import Fleet
from supervisor.servers.server_state import ServerState
from supervisor.tune.tuner import Tuner
from tests.fixtures.real_job import (
    assert_every_prompt_once,
    job_config,
    query,
    run_job,
    wait_fleet,
    wait_for,
)

pytestmark = pytest.mark.slow
PROMPTS = 1200
TUNE = {"min_window_s": 2.0, "max_window_s": 4.0, "min_answers": 3, "warmup_s": 0.3,
        "warmup_answers": 1, "sample_s": 0.25, "noise_k": 1.0, "max_trials": 3}
# A window of seconds is noisy: every simulated answer here decodes the fixture's 256 tokens
# in the same 0.5 s, so answers end in bursts, a whole batch at once. A candidate that
# quadruples the slots (+300%) clears k = 1 x that noise; a real job's windows are minutes.


def tuned_config(directory: Path, prompts: int, servers: int = 2, **tune: object) -> JobConfig:
    cfg = job_config(directory, servers=servers, prompts=prompts,
                     flags={"sim-time-scale": 10.0})
    return replace(cfg, tune=TuneSection(**{**TUNE, **tune}))   # type: ignore[arg-type]


async def ready_tuner(job: Job) -> tuple[Fleet, Tuner, TaskGroup]:
    """The job's fleet, tuner and task group once every server is READY."""
    fleet = await wait_fleet(job)
    await wait_for(lambda: all(s.state is ServerState.READY for s in fleet.own_servers)
                   and job.task_group is not None and job.tuner is not None,
                   "every server READY")
    assert job.tuner is not None and job.task_group is not None
    return fleet, job.tuner, job.task_group


async def test_kept_rejected_and_oom_candidates_nothing_lost(tmp_path: Path) -> None:
    cfg = tuned_config(tmp_path / "job", PROMPTS)
    seen: dict[str, Any] = {}

    async def drive(job: Job) -> None:
        fleet, tuner, tg = await ready_tuner(job)
        # Four times the slots (kept), a fifth of the decode speed (less goodput: rejected),
        # an OOM while loading (failed).
        space = (FlagRange("max-running-requests", (32,)), FlagRange("sim-tokens-per-s", (10,)),
                 FlagRange("sim-fault", ("oom",)))
        got = await tuner.start(TuneStartRequest(space=space, server="gpu0", force=True),
                                "test", tg)
        assert got.canary == "gpu0" and got.max_trials == 3
        await wait_for(lambda: not tuner.running, "the search to end", timeout_s=60)
        seen["tuning"] = tuner.tuning()
        seen["gpu0"] = fleet.servers["gpu0"].snapshot()
        seen["flags"] = fleet.flags("gpu0")

    job, result = await run_job(cfg, drive, timeout_s=110)
    tuning = seen["tuning"]
    assert tuning.state is TuneState.DONE, tuning.reason
    verdicts = [(t.changed, t.verdict) for t in tuning.trials]
    figures = [(t.reason, t.ratio_before, t.ratio_after, t.answers, t.window_s)
               for t in tuning.trials]
    assert verdicts[0] == ("max-running-requests 8 -> 32", TrialVerdict.KEPT), figures
    assert verdicts[1] == ("sim-tokens-per-s 50 -> 10", TrialVerdict.REJECTED), figures
    # Windows this short are noisy (answers end in bursts): the loss need not clear the noise.
    assert (tuning.trials[1].gain or 0.0) < 0
    assert verdicts[2][1] is TrialVerdict.FAILED, tuning.trials
    assert "out of memory at start" in (tuning.trials[2].reason or "")
    # Back on the best flags, READY, and the OOM not counted toward FAILED.
    assert seen["flags"]["max-running-requests"] == 32 and "sim-fault" not in seen["flags"]
    assert seen["flags"]["sim-tokens-per-s"] == 50
    assert seen["gpu0"].state is ServerState.READY
    assert seen["gpu0"].failures_in_window == 0
    rows = query(cfg, "SELECT verdict FROM tune_trials ORDER BY id")
    assert rows == [("kept",), ("rejected",), ("failed",)]
    # The winner was promoted to gpu1 and kept for the next daemon.
    kept = query(cfg, "SELECT server, json_extract(flags, '$.max-running-requests') "
                      "FROM tune_flags ORDER BY server")
    assert kept == [("gpu0", 32), ("gpu1", 32)]
    # The kept candidate's long-batch check: 32 answers on gpu0, each decoded to the job's
    # max tokens (ignore_eos) and thrown away, booked as probe waste with no prompt.
    probe = query(cfg, "SELECT server, prompt_id, tokens FROM waste WHERE cause = 'probe'")
    assert probe == [("gpu0", None, 32 * cfg.generation.max_tokens)], probe
    assert query(cfg, "SELECT requests, tokens FROM token_ledger WHERE cause = 'probe'") \
        == [(1, 32 * cfg.generation.max_tokens)]
    assert_every_prompt_once(cfg, result, PROMPTS)


async def test_stop_mid_trial_puts_the_canary_back(tmp_path: Path) -> None:
    # noise_k this high: the trial's window never ends early, so the stop finds it measuring.
    cfg = tuned_config(tmp_path / "job", 700, noise_k=1000.0, max_window_s=30.0,
                       long_batch=False)
    seen: dict[str, Any] = {}

    async def drive(job: Job) -> None:
        fleet, tuner, tg = await ready_tuner(job)
        space = (FlagRange("max-running-requests", (16,)),)
        await tuner.start(TuneStartRequest(space=space, server="gpu1", force=True), "test", tg)
        await wait_for(lambda: tuner.state is TuneState.TRIAL and "measuring" in tuner.reason,
                       "the trial to measure", timeout_s=30)
        assert fleet.flags("gpu1")["max-running-requests"] == 16
        stopped = await tuner.stop("test")
        assert stopped.was is TuneState.TRIAL and stopped.trials_done == 0
        await wait_for(lambda: not tuner.running, "the stop to finish", timeout_s=30)
        seen["tuning"] = tuner.tuning()
        seen["flags"] = fleet.flags("gpu1")
        seen["state"] = fleet.servers["gpu1"].state

    _job, result = await run_job(cfg, drive, timeout_s=90)
    tuning = seen["tuning"]
    assert tuning.state is TuneState.OFF and tuning.reason == "stopped by test"
    assert [t.verdict for t in tuning.trials] == [TrialVerdict.ABORTED]
    assert seen["flags"]["max-running-requests"] == 8 and seen["state"] is ServerState.READY
    assert query(cfg, "SELECT verdict, reason FROM tune_trials") == [
        ("aborted", "stopped by the operator")]
    assert query(cfg, "SELECT count(*) FROM tune_flags") == [(0,)]
    assert_every_prompt_once(cfg, result, 700)


async def test_one_server_is_tuned_before_vs_after_and_said_weak(tmp_path: Path) -> None:
    cfg = tuned_config(tmp_path / "job", 600, servers=1, long_batch=False)
    seen: dict[str, Any] = {}

    async def drive(job: Job) -> None:
        fleet, tuner, tg = await ready_tuner(job)
        space = (FlagRange("max-running-requests", (32,)),)
        await tuner.start(TuneStartRequest(space=space, force=True), "test", tg)
        await wait_for(lambda: tuner.state is TuneState.MEASURING, "the baseline")
        seen["measuring"] = tuner.reason
        await wait_for(lambda: not tuner.running, "the search to end", timeout_s=60)
        seen["tuning"] = tuner.tuning()
        seen["flags"] = fleet.flags("gpu0")

    _job, result = await run_job(cfg, drive, timeout_s=90)
    tuning = seen["tuning"]
    assert tuning.weak and "one server: the canary before vs after" in seen["measuring"]
    assert tuning.state is TuneState.DONE, tuning.reason
    (trial,) = tuning.trials
    assert trial.verdict is TrialVerdict.KEPT, trial
    assert trial.controls_tok_s is None and trial.canary_tok_s is not None
    assert seen["flags"]["max-running-requests"] == 32
    assert_every_prompt_once(cfg, result, 600)
