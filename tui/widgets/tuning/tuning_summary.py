"""What the tuner is doing: its state and reason, the canary, the trial budget, the best
flags known and their gain; what a daemon without a tuner, or one never started, says."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from supervisor.client.tuning_text import (
    ACTIVE,
    WEAK,
    flags_text,
    gain_text,
    started,
    trials_text,
)
from supervisor.contract.status import Status
from supervisor.contract.tuning import TuneState

STATE_STYLE = {
    TuneState.OFF: "dim",
    TuneState.DONE: "bold green",
    TuneState.NOT_WORTH_IT: "bold yellow",
}
NO_TUNER = "this daemon reports no tuner (a version without one)"
NEVER = "not started: s here, `ctl tune start`, or [tune] enabled = true in the config"


def summary_text(status: Status | None) -> Text:
    t = Text()
    if status is None:
        t.append("waiting for the daemon's first status…", style="dim")
        return t
    tuning = status.tuning
    if tuning is None:
        t.append(NO_TUNER, style="dim")
        return t
    style = STATE_STYLE.get(tuning.state, "bold cyan" if tuning.state in ACTIVE else "")
    t.append(tuning.state.value.upper(), style=style)
    if not started(tuning):
        t.append("  " + NEVER, style="dim")
        return t
    t.append(f"  canary {tuning.canary or '--'} · {trials_text(tuning)} · ")
    t.append(gain_text(tuning.gain), style="bold")
    if tuning.started_by:
        t.append(f" · started by {tuning.started_by}", style="dim")
    if tuning.reason:
        t.append(f"\n{tuning.reason}")
    t.append("\nbest flags  ", style="bold")
    t.append(flags_text(tuning.best) or "none kept yet (the canary's own)")
    if tuning.weak:
        t.append(f"\n{WEAK}", style="yellow")
    return t


class TuningSummary(Static):
    status: reactive[Status | None] = reactive(None)

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", markup=False, **kwargs)  # type: ignore[arg-type]

    def watch_status(self, status: Status | None) -> None:
        self.update(summary_text(status))
