"""The tuner's trials, newest last: one row of figures per trial and, under it, its window
and its one-line reason. Drawn as text fitted to the width, not a DataTable: the reason
needs the whole width under its row, and the `changed` column gives way (cut with an
ellipsis) before any figure does, so 80 columns show every figure of every trial."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from supervisor.client.tuning_text import outcome, percent, tok_s
from supervisor.contract.tuning import Trial, TrialVerdict
from tui.formatting import one_line

# (heading, right-aligned); `changed` takes the room the others leave.
COLUMNS = (("#", True), ("server", False), ("changed", False), ("phase", False),
           ("canary", True), ("ctrl", True), ("gain", True), ("noise", True))
FLEX = "changed"
OUTCOME_STYLE = {
    TrialVerdict.KEPT.value: "bold green",
    TrialVerdict.REJECTED.value: "yellow",
    TrialVerdict.FAILED.value: "bold red",
    TrialVerdict.ABORTED.value: "dim",
}
RUNNING_STYLE = "bold cyan"
LEGEND = ("canary, ctrl: output tok/s per GPU in the window · gain: canary/controls against "
          "the same ratio before · noise: control vs control")
MIN_CHANGED = 12


def cells(t: Trial) -> dict[str, str]:
    return {"#": str(t.id), "server": t.server, "changed": t.changed.replace(" -> ", "→"),
            "phase": outcome(t), "canary": tok_s(t.canary_tok_s),
            "ctrl": tok_s(t.controls_tok_s), "gain": percent(t.gain),
            "noise": "--" if t.noise is None else f"±{100 * t.noise:.1f}%"}


def clip_changed(text: str, width: int) -> str:
    """Cut the flag's name, never the move: `max-running-re… 32→48`."""
    if cell_len(text) <= width:
        return text
    name, _, move = text.rpartition(" ")
    keep = width - cell_len(move) - 2
    return f"{name[:keep]}… {move}" if name and keep >= 3 else one_line(text, width)


def detail(t: Trial) -> str:
    """The line under a trial: how much it measured, and why it ended as it did."""
    parts = []
    if t.window_s is not None:
        parts.append(f"{t.window_s:.0f} s measured, {t.answers} answers")
    if t.reason:
        parts.append(t.reason)
    return " · ".join(parts)


def table_text(trials: tuple[Trial, ...], width: int) -> Text:
    """The heading, then two lines per trial, every line at most `width` cells."""
    rows = [cells(t) for t in trials]
    natural = {h: max([cell_len(h)] + [cell_len(r[h]) for r in rows]) for h, _ in COLUMNS}
    fixed = sum(w for h, w in natural.items() if h != FLEX) + len(COLUMNS) - 1
    natural[FLEX] = max(MIN_CHANGED, min(natural[FLEX], width - fixed))

    def line(values: dict[str, str], style_of: dict[str, str]) -> Text:
        out = Text(no_wrap=True, overflow="ellipsis")
        for i, (h, right) in enumerate(COLUMNS):
            w = natural[h]
            v = values[h]
            if cell_len(v) > w:
                v = clip_changed(v, w) if h == FLEX else one_line(v, w)
            out.append(" " * (i > 0))
            out.append(v.rjust(w) if right else v.ljust(w), style=style_of.get(h, ""))
        out.truncate(width)
        return out

    text = Text(no_wrap=True, overflow="ellipsis")
    text.append_text(line({h: h for h, _ in COLUMNS}, {h: "bold" for h, _ in COLUMNS}))
    for t, r in zip(trials, rows):
        text.append("\n")
        style = OUTCOME_STYLE.get(r["phase"], RUNNING_STYLE)
        text.append_text(line(r, {"phase": style}))
        more = detail(t)
        if more:
            text.append("\n")
            text.append("    " + one_line(more, max(1, width - 4)), style="dim")
    return text


class TrialTable(Static):
    trials: reactive[tuple[Trial, ...]] = reactive(())

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", markup=False, **kwargs)  # type: ignore[arg-type]

    def watch_trials(self) -> None:
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        if not self.trials:
            self.update(Text("no trials yet", style="dim"))
            return
        width = self.content_region.width if self.is_mounted else 0
        self.update(table_text(self.trials, width or 200))
