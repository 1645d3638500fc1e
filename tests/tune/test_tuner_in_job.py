"""The tuner in a real job on simulated servers (real child processes, real SQLite, real
shards): a candidate kept, one rejected, one that OOMs at start (the canary goes back to the best flags, is
not FAILED and its failure not counted), and every prompt exactly once in the shards."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.contract.tuning import FlagRange, TrialVerdict, TuneStartRequest, TuneState
from supervisor.job.main_loop import Job
from supervisor.servers.server_state import ServerState
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
# Every simulated answer here takes the same 0.5 s, so answers end in bursts and a window of
# seconds is noisy: k = 1 keeps the doubled slots (+100%) clear of it.


async def test_kept_rejected_and_oom_candidates_nothing_lost(tmp_path: Path) -> None:
    cfg = job_config(tmp_path / "job", servers=2, prompts=PROMPTS,
                     flags={"sim-time-scale": 10.0})
    cfg = type(cfg)(**{**cfg.__dict__, "tune": type(cfg.tune)(**TUNE)})
    seen: dict[str, object] = {}

    async def drive(job: Job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: all(s.state is ServerState.READY for s in fleet.own_servers)
                       and job.task_group is not None and job.tuner is not None,
                       "every server READY")
        assert job.tuner is not None and job.task_group is not None
        # Twice the slots (kept), half the decode speed (less goodput: rejected), an OOM while
        # loading (failed).
        space = (FlagRange("max-running-requests", (16,)), FlagRange("sim-tokens-per-s", (20,)),
                 FlagRange("sim-fault", ("oom",)))
        got = await job.tuner.start(TuneStartRequest(space=space, server="gpu0", force=True),
                                    "test", job.task_group)
        assert got.canary == "gpu0" and got.max_trials == 3
        await wait_for(lambda: not job.tuner.running, "the search to end", timeout_s=60)
        seen["tuning"] = job.tuner.tuning()
        seen["gpu0"] = fleet.servers["gpu0"].snapshot()
        seen["flags"] = fleet.flags("gpu0")

    job, result = await run_job(cfg, drive, timeout_s=110)
    tuning = seen["tuning"]
    assert tuning.state is TuneState.DONE, tuning.reason
    verdicts = [(t.changed, t.verdict) for t in tuning.trials]
    figures = [(t.reason, t.ratio_before, t.ratio_after, t.answers, t.window_s)
               for t in tuning.trials]
    assert verdicts[0] == ("max-running-requests 8 -> 16", TrialVerdict.KEPT), figures
    assert verdicts[1] == ("sim-tokens-per-s 50 -> 20", TrialVerdict.REJECTED), tuning.trials
    # Windows this short are noisy (answers end in bursts): the loss need not clear the noise.
    assert (tuning.trials[1].gain or 0.0) < 0
    assert verdicts[2][1] is TrialVerdict.FAILED, tuning.trials
    assert "out of memory at start" in (tuning.trials[2].reason or "")
    # Back on the best flags, READY, and the OOM not counted toward FAILED.
    assert seen["flags"]["max-running-requests"] == 16 and "sim-fault" not in seen["flags"]
    assert seen["flags"]["sim-tokens-per-s"] == 50
    assert seen["gpu0"].state is ServerState.READY
    assert seen["gpu0"].failures_in_window == 0
    rows = query(cfg, "SELECT verdict FROM tune_trials ORDER BY id")
    assert rows == [("kept",), ("rejected",), ("failed",)]
    # The winner was promoted to gpu1 and kept for the next daemon.
    kept = query(cfg, "SELECT server, json_extract(flags, '$.max-running-requests') "
                      "FROM tune_flags ORDER BY server")
    assert kept == [("gpu0", 16), ("gpu1", 16)]
    assert_every_prompt_once(cfg, result, PROMPTS)


async def test_stop_mid_trial_puts_the_canary_back(tmp_path: Path) -> None:
    # noise_k this high: the trial's window never ends early, so the stop finds it measuring.
    tune = {**TUNE, "noise_k": 1000.0, "max_window_s": 30.0, "long_batch": False}
    cfg = job_config(tmp_path / "job", servers=2, prompts=700,
                     flags={"sim-time-scale": 10.0})
    cfg = type(cfg)(**{**cfg.__dict__, "tune": type(cfg.tune)(**tune)})
    seen: dict[str, object] = {}

    async def drive(job: Job) -> None:
        fleet = await wait_fleet(job)
        await wait_for(lambda: all(s.state is ServerState.READY for s in fleet.own_servers)
                       and job.task_group is not None and job.tuner is not None,
                       "every server READY")
        tuner = job.tuner
        assert tuner is not None and job.task_group is not None
        space = (FlagRange("max-running-requests", (16,)),)
        await tuner.start(TuneStartRequest(space=space, server="gpu1", force=True), "test",
                          job.task_group)
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
