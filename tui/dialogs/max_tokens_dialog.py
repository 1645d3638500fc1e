"""Set max tokens live: the current value doubled as the default, and what to do with the
answers cut off at the old limit. Continuing them from their stored tokens comes first (only
the tokens past the old limit are decoded), requeueing them from scratch second, leaving them
last. A daemon that cannot continue (no `continuation` in its status) is offered the requeue.
Installed once; `prepare()` before each push fills in the current figures."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, RadioButton, RadioSet, Static

from supervisor.client.text import si
from supervisor.contract.continuation import Continuation
from tui.dialogs.form_dialog import FormDialog


class Truncated(StrEnum):
    """What the raise does with the answers truncated at a lower limit."""
    CONTINUE = "continue"
    REQUEUE = "requeue"
    LEAVE = "leave"


@dataclass(frozen=True)
class MaxTokensChoice:
    value: int
    truncated: Truncated

    @property
    def requeue_truncated(self) -> bool:
        return self.truncated is Truncated.REQUEUE

    @property
    def continue_truncated(self) -> bool:
        return self.truncated is Truncated.CONTINUE


def proposed(current: int, context_length: int | None) -> int:
    """Twice the current limit, kept below the context length (SGLang refuses at or past it)."""
    value = current * 2
    if context_length is not None and value >= context_length:
        value = max(current, context_length // 2)
    return value


def continue_label(c: Continuation) -> str:
    return f"Continue {c.continuable:,} truncated answers: {si(c.tokens_kept)} tokens kept"


def rerun_note(c: Continuation | None) -> str:
    """Under the continue choice: the answers it cannot continue, and what happens to them."""
    if c is None or not c.without_ids:
        return ""
    return (f"{c.without_ids:,} answers have no stored tokens: re-run from the start. "
            "Loops stay as they are.")


class MaxTokensDialog(FormDialog[MaxTokensChoice | None]):

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.context_length: int | None = None
        self.truncated: int | None = None
        self.continuation: Continuation | None = None

    def prepare(self, current: int, context_length: int | None, truncated: int | None,
                continuation: Continuation | None = None) -> MaxTokensDialog:
        self.current, self.context_length = current, context_length
        self.truncated, self.continuation = truncated, continuation
        return self

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide") as box:
            box.border_title = "Max tokens"
            yield Static("", classes="dialog-text", id="about")
            yield Input("", type="integer", id="value")
            with RadioSet(id="truncated"):
                yield RadioButton("", id="continue")
                yield RadioButton("", id="requeue")
                yield RadioButton("Leave the truncated answers as they are", id="leave")
            yield Static("", id="note", classes="dialog-note")
            yield Static("", id="error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Set (enter)", variant="primary", id="ok")
                yield Button("Cancel (esc)", id="cancel")

    def on_screen_resume(self) -> None:
        limit = (f" (below the context length, {self.context_length:,})"
                 if self.context_length else "")
        self.query_one("#about", Static).update(
            f"Now {self.current:,}. New limit{limit}; requests in flight finish at the old one.")
        field = self.query_one("#value", Input)
        field.value = str(proposed(self.current, self.context_length))
        c = self.continuation
        # Continue is offered where the daemon can do it and has something to continue; an
        # answer without stored tokens would only be re-run, which the requeue says plainly.
        can_continue = c is not None and c.continuable > 0
        cont = self.query_one("#continue", RadioButton)
        # Hidden and disabled: the radio set's arrow keys skip a disabled button.
        cont.display, cont.disabled = can_continue, not can_continue
        if c is not None:
            cont.label = continue_label(c)
        # Both counts from the daemon's one read where it continues, so that they agree (the
        # job's truncated count is fresher than the continuable figures' background read).
        truncated = c.continuable + c.without_ids if c is not None else self.truncated
        how_many = f"{truncated:,} " if truncated is not None else ""
        self.query_one("#requeue", RadioButton).label = (
            f"Requeue the {how_many}truncated answers from scratch")
        self.query_one(f"#{'continue' if can_continue else 'requeue'}", RadioButton).value = True
        self._show_note()
        self.query_one("#error", Static).update("")
        field.focus()

    def on_radio_set_changed(self) -> None:
        self._show_note()

    def _choice(self) -> Truncated:
        pressed = self.query_one("#truncated", RadioSet).pressed_button
        return Truncated(pressed.id) if pressed is not None and pressed.id else Truncated.LEAVE

    def _show_note(self) -> None:
        choice = self._choice()
        note = {Truncated.CONTINUE: rerun_note(self.continuation),
                Truncated.REQUEUE: "Each answer is decoded again from its first token.",
                Truncated.LEAVE: "Raise only: the truncated answers stay in the output."}
        self.query_one("#note", Static).update(note[choice])

    def _submit(self) -> None:
        text = self.query_one("#value", Input).value.strip()
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            self.query_one("#error", Static).update(f"{text!r} is not a whole number ≥ 1")
            return
        self.dismiss(MaxTokensChoice(value, self._choice()))
