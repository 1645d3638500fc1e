"""Plain-text views of the tuner's records (contract/tuning.py): the status report's tuning
line, the answers of `ctl tune start/stop`, and the figures the TUI's tuning screen shows.
Standard library only."""

from __future__ import annotations

from supervisor.client.flag_space import space_text
from supervisor.contract.status import Flag, FlagValue
from supervisor.contract.tuning import (
    Trial,
    TuneStartResult,
    TuneState,
    TuneStopResult,
    Tuning,
)

# The states in which a search is under way (stop is offered, start is refused by the daemon).
ACTIVE = frozenset({TuneState.WAITING, TuneState.MEASURING, TuneState.TRIAL,
                    TuneState.PROMOTING})
WEAK = "one server, no controls: canary before vs after only (weaker)"


def percent(x: float | None, sign: str = "+") -> str:
    """A ratio as a signed percentage ("+13.2%"); "--" where not measured yet."""
    return "--" if x is None else f"{100 * x:{sign}.1f}%"


def gain_text(gain: float | None) -> str:
    return "nothing kept yet" if gain is None else f"best {percent(gain)} per GPU"


def tok_s(x: float | None) -> str:
    return "--" if x is None else f"{x:,.0f}"


def value_text(value: FlagValue) -> str:
    if isinstance(value, tuple):
        return " ".join(value_text(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def flags_text(flags: tuple[Flag, ...]) -> str:
    """`max-running-requests=48 mem-fraction-static=0.9`, as `--space` and the config read."""
    return " ".join(f"{f.name}={value_text(f.value)}" for f in flags)


def trials_text(t: Tuning) -> str:
    """Where the search is in its budget: "trial 3/8" while one runs, "2/8 trials" between
    them, "5 trials" once no more are left, "no trials" before the first is planned."""
    total = t.trials_done + t.trials_left
    if total == 0:                  # waiting for the fleet, before the search is set up
        return "no trials"
    if t.trials_left == 0:
        return f"{t.trials_done} trials"
    if t.state is TuneState.TRIAL:
        return f"trial {t.trials_done + 1}/{total}"
    return f"{t.trials_done}/{total} trials"


def started(t: Tuning) -> bool:
    """Whether a search ever ran: OFF after a stop or a failure keeps its canary, reason
    and trials, which say what it found."""
    return t.state is not TuneState.OFF or bool(t.canary or t.reason or t.trials)


def outcome(trial: Trial) -> str:
    """The verdict once the trial ended, its phase while it runs."""
    return trial.verdict.value if trial.verdict is not None else trial.phase


def tuning_lines(t: Tuning | None) -> list[str]:
    """The status report's lines on the tuner (none: no tuner, or never started): its state,
    canary, budget, best gain and reason; then the best flags known, when any."""
    if t is None or not started(t):
        return []
    parts = [t.state.value.upper(), f"canary {t.canary or '--'}", trials_text(t),
             gain_text(t.gain)]
    text = ", ".join(parts) + (f": {t.reason}" if t.reason else "")
    out = [text + (f" [{WEAK}]" if t.weak else "")]
    if t.best:
        out.append(f"best flags {flags_text(t.best)}")
    return out


def tune_start_text(r: TuneStartResult) -> str:
    asked = space_text(r.space) or "the default space"
    canary = f"canary {r.canary}, " if r.canary else ""
    return (f"tuner {r.state.value}: {r.reason} ({canary}up to {r.max_trials} trials over "
            f"{asked})")


def tune_stop_text(r: TuneStopResult) -> str:
    best = flags_text(r.best) or "the flags it started from"
    return f"tuner stopped (was {r.was.value}) after {r.trials_done} trials; best: {best}"
