"""`?`: every key, what it does, and which ones this session may use.

It fits 80x24 without wrapping: one line per key (a key bound to two actions, p: pause /
resume, shares its line), and one line on what quitting does, which depends on who started
this TUI (`dflash-tui` leaves the daemon running; `demo --tui` ends the demo)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

ACTIONS = {"restart", "reset", "retune", "max_tokens", "requeue", "requeue_with_loops",
           "pause", "resume", "restart_all"}

NAVIGATION = "↑↓ j k select a server · enter its log · esc close a dialog or the log"

# The columns whose names are short enough to need a word (the servers table's and the job
# line's). SGLang's figures come from its /metrics, sampled every few seconds and counting
# every request it holds, those it is still finishing or aborting included: they can
# disagree with ours, most visibly while dispatch is paused (ours drain, it runs on), so the
# table marks that case and an old sample (server_table.py sglang_cell).
COLUMNS = (
    ("in fl", "our requests on the wire to the server / its limit"),
    ("sgl run/q", "SGLang's running / queued: all it holds, aborted ones too"),
    ("", "`still`: paused, runs what was sent · `12s old`: stale sample"),
    ("kv", "SGLang's KV cache in use · rst restarts · up time since READY"),
    ("stopped", "loops stopped as they ran, before burning max tokens"),
)

QUIT_LEAVES_DAEMON = "quit; the daemon keeps running"
QUIT_ENDS_DEMO = "quit and end the demo (the same command resumes it)"
AUDIT_NOTE = "Every action goes into the daemon's audit trail, with your user name."


def key_rows(bindings: list[BindingType],
             quit_text: str | None = None) -> list[tuple[str, str, tuple[str, ...]]]:
    """(key, what it does, actions) per key that has a described binding; a key bound to
    two actions (p: pause / resume) is one row. `quit_text` says what quitting does here."""
    rows: dict[str, tuple[str, list[str], list[str]]] = {}
    for b in bindings:
        if isinstance(b, Binding) and b.description:
            keys = b.key_display or b.key
            what = b.tooltip or b.description
            if b.action == "app.quit" and quit_text:
                what = quit_text
            if keys in rows:
                rows[keys][1].append(what)
                rows[keys][2].append(b.action)
            else:
                rows[keys] = (keys, [what], [b.action])
    return [(keys, " / ".join(whats), tuple(actions)) for keys, whats, actions in rows.values()]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, bindings: list[BindingType], readonly: bool,
                 quit_text: str = QUIT_LEAVES_DAEMON) -> None:
        super().__init__()
        self.bindings = bindings
        self.readonly = readonly
        self.quit_text = quit_text

    def compose(self) -> ComposeResult:
        lines = []
        for keys, description, actions in key_rows(self.bindings, self.quit_text):
            # Read-only: the keys that act are dimmed (the title says why); no longer line.
            off = self.readonly and any(a in ACTIONS for a in actions)
            row = f" [b]{keys:<8}[/b] {description}"
            lines.append(f"[dim]{row}[/dim]" if off else row)
        lines.append(f" {NAVIGATION}")
        # No blank line before the columns: 80x24 has room for every key and no more.
        lines += [f" [b]{name:<9}[/b] {what}" for name, what in COLUMNS]
        lines.append("")
        lines.append(" " + AUDIT_NOTE)
        with Vertical(classes="dialog wide help") as box:
            box.border_title = "dflash-tui keys" + (
                " (read-only: the dimmed keys are off)" if self.readonly else "")
            box.border_subtitle = "esc close"
            yield Static("\n".join(lines), classes="dialog-text")
