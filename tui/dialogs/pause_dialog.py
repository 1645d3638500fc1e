"""Pause dispatch with a reason (it is recorded in the audit trail and shown to everyone).
Installed once; each opening starts from the default reason."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

DEFAULT_REASON = "paused by operator"


class PauseDialog(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = "Pause dispatch"
            yield Static("No new requests are sent; those in flight finish. The servers "
                         "keep running. Why?", classes="dialog-text")
            yield Input(DEFAULT_REASON, id="reason")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Pause (enter)", variant="warning", id="ok")
                yield Button("Cancel (esc)", id="cancel")

    def on_screen_resume(self) -> None:
        field = self.query_one("#reason", Input)
        field.value = DEFAULT_REASON
        field.focus()

    def on_input_submitted(self) -> None:
        self._submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ok":
            self._submit()
        else:
            self.dismiss(None)

    def _submit(self) -> None:
        self.dismiss(self.query_one("#reason", Input).value.strip() or DEFAULT_REASON)

    def action_cancel(self) -> None:
        self.dismiss(None)
