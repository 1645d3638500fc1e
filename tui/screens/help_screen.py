"""`?`: every key, what it does, and which ones this session may use."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

ACTIONS = {"restart", "reset", "retune", "max_tokens", "requeue", "pause", "resume",
           "restart_all"}

NAVIGATION = (
    ("↑↓ j k", "select a server"),
    ("enter", "the selected server's log"),
    ("esc", "close a dialog or the log"),
)


def key_rows(bindings: list[BindingType]) -> list[tuple[str, str, str]]:
    """(key, what it does, action) per binding that has a description; one key bound to
    two actions (p: pause / resume) is listed twice."""
    rows = []
    for b in bindings:
        if isinstance(b, Binding) and b.description:
            rows.append((b.key_display or b.key, b.tooltip or b.description, b.action))
    return rows


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, bindings: list[BindingType], readonly: bool) -> None:
        super().__init__()
        self.bindings = bindings
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        lines = []
        for keys, description, action in key_rows(self.bindings):
            off = self.readonly and action in ACTIONS
            lines.append(f"  [b]{keys:<10}[/b] {description}" +
                         ("  [dim](read-only: off)[/dim]" if off else ""))
        lines.append("")
        lines += [f"  [b]{keys:<10}[/b] {what}" for keys, what in NAVIGATION]
        lines.append("")
        lines.append("  Quitting leaves the daemon running; every action is recorded in its "
                     "audit trail with your user name.")
        with Vertical(classes="dialog wide") as box:
            box.border_title = "dflash-tui keys"
            yield Static("\n".join(lines), classes="dialog-text")
