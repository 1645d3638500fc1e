"""A trial's verdict from its outcome, and whether a trial pays for the job that remains."""

from __future__ import annotations

from supervisor.contract.tuning import TrialVerdict as V
from supervisor.tune.safety import TrialOutcome, judge
from supervisor.tune.worth import worth_it


def test_a_candidate_that_does_not_come_up_fails_and_an_oom_is_named() -> None:
    v, why = judge(TrialOutcome(False, "backoff: oom: CUDA out of memory"))
    assert v is V.FAILED and why.startswith("out of memory at start")
    v, why = judge(TrialOutcome(False, "not READY within 90 s"))
    assert v is V.FAILED and why.startswith("did not become READY")


def test_dying_while_measured_retracting_or_failing_the_probe_fails() -> None:
    assert judge(TrialOutcome(True, died="backoff: Decode out of memory"))[0] is V.FAILED
    v, why = judge(TrialOutcome(True, gain=0.5, noise=0.01, answers=100, retracted=20))
    assert v is V.FAILED and "retracted 20 requests over 100 answers" in why
    assert judge(TrialOutcome(True, gain=0.5, noise=0.01, answers=100, retracted=2))[0] \
        is V.KEPT
    assert judge(TrialOutcome(True, gain=0.5, noise=0.01, probe="oom"))[0] is V.FAILED


def test_a_gain_is_kept_only_beyond_k_times_the_noise() -> None:
    assert judge(TrialOutcome(True, gain=0.10, noise=0.02, noise_k=3))[0] is V.KEPT
    v, why = judge(TrialOutcome(True, gain=0.05, noise=0.02, noise_k=3))
    assert v is V.REJECTED and "not beyond 3 x noise 2.0%" in why
    v, why = judge(TrialOutcome(True, gain=-0.2, noise=0.02))
    assert v is V.REJECTED and why.startswith("lowered goodput: -20.0%")
    assert judge(TrialOutcome(True, gain=0.5, noise=None))[0] is V.REJECTED
    assert judge(TrialOutcome(True))[0] is V.REJECTED


def test_a_window_a_control_left_is_not_comparable() -> None:
    v, why = judge(TrialOutcome(True, gain=0.5, noise=0.01, disturbed="gpu2 backoff: oom"))
    assert v is V.REJECTED and why == ("not comparable: a control left READY during the "
                                       "window (gpu2 backoff: oom)")


def test_a_job_about_to_end_is_not_tuned_unless_forced() -> None:
    w = worth_it(40 * 60, startup_s=300, window_s=600, servers=8)
    assert not w.pays and w.reason.startswith("job ends in 40 min: not tuning")
    assert worth_it(40 * 60, 300, 600, 8, force=True).pays
    long = worth_it(30 * 3600, startup_s=300, window_s=600, servers=8)
    assert long.pays and long.gain_s > long.cost_s and "30.0 h" in long.reason
    unknown = worth_it(None, 300, 600, 8)
    assert not unknown.pays and "ETA is not known" in unknown.reason


def test_a_job_ending_in_seconds_says_under_a_minute_not_zero() -> None:
    w = worth_it(20, startup_s=30, window_s=60, servers=3)
    assert not w.pays and w.reason.startswith("job ends in under 1 min: not tuning"), w.reason
    assert w.reason.endswith("(a trial costs ~2 min of a server, expected to save under 1 min)")
