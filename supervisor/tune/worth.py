"""Whether a trial pays for itself over the job that remains.

A trial costs the canary's restart (nothing served while its model loads: the observed start
time of this server's last start) and a window in which it may serve less. If it wins, the
gain reaches every server after a rolling promotion (one more restart each) for the rest of
the job. The tuner tunes only when the expected gain over the remaining job, discounted by the
chance that a trial wins at all, is larger than what the trial and the promotion cost.
"""

from __future__ import annotations

from dataclasses import dataclass

# How often a step of the default space wins, for the estimate only: most steps past the
# first few do not beat the noise.
WIN_CHANCE = 0.3
# The gain a winning step is expected to bring: the seed's job got +75% from three flags.
EXPECTED_GAIN = 0.15


@dataclass(frozen=True)
class Worth:
    pays: bool
    reason: str
    cost_s: float          # server-seconds a trial and its promotion cost
    gain_s: float          # server-seconds it is expected to save


def minutes(seconds: float) -> str:
    """A duration as an operator reads it: "under 1 min" rather than a rounded "0 min"."""
    if seconds < 30:
        return "under 1 min"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def about(seconds: float) -> str:
    """An estimate: "~2 min", or "under 1 min" (a "~" before it would say nothing more)."""
    text = minutes(seconds)
    return text if seconds < 30 else f"~{text}"


def worth_it(remaining_s: float | None, startup_s: float, window_s: float, servers: int,
             force: bool = False, expected_gain: float = EXPECTED_GAIN,
             win_chance: float = WIN_CHANCE) -> Worth:
    """remaining_s: the job's ETA (None: not known yet); startup_s: the canary's last start."""
    n = max(1, servers)
    trial_s = startup_s + window_s
    cost = startup_s + window_s * expected_gain + (n - 1) * startup_s * win_chance
    if remaining_s is None:
        if force:
            return Worth(True, "forced: the job's ETA is not known yet", cost, 0.0)
        return Worth(False, "the job's ETA is not known yet: not tuning until it is", cost, 0.0)
    after = max(0.0, remaining_s - trial_s)
    gain = n * after * expected_gain / (1 + expected_gain) * win_chance
    if gain > cost:
        return Worth(True, f"job ends in {minutes(remaining_s)}: a trial costs "
                           f"{about(trial_s)}, expected to save {about(gain / n)}",
                     cost, gain)
    why = (f"job ends in {minutes(remaining_s)}: not tuning (a trial costs "
           f"{about(trial_s)} of a server, expected to save {about(gain / n)})")
    if force:
        return Worth(True, f"forced: {why}", cost, gain)
    return Worth(False, why, cost, gain)
