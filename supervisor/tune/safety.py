"""What rejects a candidate: the verdict of one trial from how its restart and window went.

FAILED: it did not come up (an OOM, a crash, not READY within the startup timeout), died while
measured, retracted requests at a high rate (SGLang's num_retracted_reqs: it admitted more
than its KV pool holds and throws decoded tokens away), or did not get through the long-batch
probe (the OOM that comes only with the first full batch of the job's longest prompts).
REJECTED: it ran, but its gain is not beyond the noise, it lowered goodput, or a control left
READY during its window (the comparison no longer holds; rejecting errs on the safe side).
KEPT otherwise.
The runner then puts the canary back on the best flags known for anything but KEPT; the
crash itself is not counted toward the restart policy's FAILED (managed_server.py, `trial`).
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.contract.tuning import TrialVerdict

OOM_WORDS = ("out of memory", "not enough memory", "oom")
MAX_RETRACT_PER_ANSWER = 0.05   # retractions per canary answer above this: too aggressive


@dataclass(frozen=True)
class TrialOutcome:
    started: bool                   # the retune's restart reached READY
    start_reason: str = ""          # why not (the retune's words)
    died: str | None = None         # the canary left READY while measured: why
    gain: float | None = None
    noise: float | None = None
    noise_k: float = 3.0
    answers: int = 0
    retracted: float | None = None  # SGLang's num_retracted_reqs over the window
    probe: str | None = None        # the long-batch probe's failure; None: passed or not run
    disturbed: str | None = None    # a control that left READY during the window


def is_oom(words: str) -> bool:
    low = words.lower()
    return any(w in low for w in OOM_WORDS)


def judge(o: TrialOutcome) -> tuple[TrialVerdict, str]:
    """The verdict and its one-line reason."""
    if not o.started:
        what = "out of memory at start" if is_oom(o.start_reason) else "did not become READY"
        return TrialVerdict.FAILED, f"{what}: {o.start_reason}"
    if o.died is not None:
        what = "out of memory" if is_oom(o.died) else "left READY"
        return TrialVerdict.FAILED, f"{what} while measured: {o.died}"
    if o.probe is not None:
        return TrialVerdict.FAILED, f"long-batch probe: {o.probe}"
    if o.retracted is not None and o.answers > 0 \
            and o.retracted / o.answers > MAX_RETRACT_PER_ANSWER:
        return TrialVerdict.FAILED, (f"retracted {o.retracted:g} requests over {o.answers} "
                                     f"answers: SGLang admits more than its KV pool holds")
    if o.disturbed is not None:
        return TrialVerdict.REJECTED, (f"not comparable: a control left READY during the "
                                       f"window ({o.disturbed})")
    if o.gain is None:
        return TrialVerdict.REJECTED, "no figures: the canary answered nothing measurable"
    noise_s = "unknown" if o.noise is None else f"{o.noise:.1%}"
    if o.gain < 0 and (o.noise is None or -o.gain > o.noise_k * o.noise):
        return TrialVerdict.REJECTED, f"lowered goodput: {o.gain:+.1%} (noise {noise_s})"
    if o.noise is None or o.gain <= o.noise_k * o.noise:
        return TrialVerdict.REJECTED, (f"gain {o.gain:+.1%} not beyond {o.noise_k:g} x "
                                       f"noise {noise_s}")
    return TrialVerdict.KEPT, f"gain {o.gain:+.1%} beyond {o.noise_k:g} x noise {noise_s}"
