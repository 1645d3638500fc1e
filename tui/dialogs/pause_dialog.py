"""Pause dispatch with a reason (it is recorded in the audit trail and shown to everyone).
Installed once; each opening starts from the default reason."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Static

from tui.dialogs.form_dialog import FormDialog

DEFAULT_REASON = "paused by operator"


class PauseDialog(FormDialog[str | None]):

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

    def _submit(self) -> None:
        self.dismiss(self.query_one("#reason", Input).value.strip() or DEFAULT_REASON)
