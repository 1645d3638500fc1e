"""Yes/no before an action that interrupts work (a restart, a requeue).

Keys as in every dialog here: Enter does what the dialog offers (its button has the focus;
`y` too), Escape cancels (`n` too); Tab moves to Cancel, and Enter then cancels.

One instance serves every question: it is installed once and `ask()`ed before each push, so
opening it costs no compose or styling (a key press must show its answer quickly)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmDialog(ModalScreen[bool]):
    BINDINGS = [
        # Enter answers yes even where no button has the focus (a terminal that reports
        # losing focus, tmux without focus events, leaves none focused); a focused Cancel
        # button takes its own Enter first.
        Binding("y,enter", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.title_text = ""
        self.question = ""
        self.yes = "Yes"

    def ask(self, title: str, question: str, yes: str = "Yes") -> ConfirmDialog:
        self.title_text, self.question, self.yes = title, question, yes
        return self

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("", markup=False, classes="dialog-text", id="question")
            with Horizontal(classes="dialog-buttons"):
                yield Button("", variant="warning", id="yes")
                yield Button("Cancel (esc)", id="no")

    def on_screen_resume(self) -> None:
        self.query_one(".dialog").border_title = self.title_text
        self.query_one("#question", Static).update(self.question)
        yes = self.query_one("#yes", Button)
        yes.label = f"{self.yes} (enter)"
        yes.focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
