"""Set max tokens live: the current value doubled as the default, with "requeue truncated"
offered so the prompts cut off at the old limit run again at the new one.
Installed once; `prepare()` before each push fills in the current figures."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Checkbox, Input, Static

from tui.dialogs.form_dialog import FormDialog


@dataclass(frozen=True)
class MaxTokensChoice:
    value: int
    requeue_truncated: bool


def proposed(current: int, context_length: int | None) -> int:
    """Twice the current limit, kept below the context length (SGLang refuses at or past it)."""
    value = current * 2
    if context_length is not None and value >= context_length:
        value = max(current, context_length // 2)
    return value


class MaxTokensDialog(FormDialog[MaxTokensChoice | None]):

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.context_length: int | None = None
        self.truncated: int | None = None

    def prepare(self, current: int, context_length: int | None,
                truncated: int | None) -> MaxTokensDialog:
        self.current, self.context_length, self.truncated = current, context_length, truncated
        return self

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = "Max tokens"
            yield Static("", classes="dialog-text", id="about")
            yield Input("", type="integer", id="value")
            yield Checkbox("", value=True, id="requeue")
            yield Static("", id="error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Set (enter)", variant="primary", id="ok")
                yield Button("Cancel (esc)", id="cancel")

    def on_screen_resume(self) -> None:
        limit = (f" (below the context length, {self.context_length:,})"
                 if self.context_length else "")
        how_many = f"{self.truncated:,} " if self.truncated is not None else ""
        self.query_one("#about", Static).update(
            f"Now {self.current:,}. New limit{limit}; requests in flight finish at the old one.")
        field = self.query_one("#value", Input)
        field.value = str(proposed(self.current, self.context_length))
        requeue = self.query_one("#requeue", Checkbox)
        requeue.label = f"Also requeue the {how_many}truncated prompts"
        requeue.value = True
        self.query_one("#error", Static).update("")
        field.focus()

    def _submit(self) -> None:
        text = self.query_one("#value", Input).value.strip()
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            self.query_one("#error", Static).update(f"{text!r} is not a whole number ≥ 1")
            return
        self.dismiss(MaxTokensChoice(value, self.query_one("#requeue", Checkbox).value))
