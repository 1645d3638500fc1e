"""What every form dialog does alike: Enter in a field or the OK button submits the form;
Escape or Cancel closes it with no answer."""

from __future__ import annotations

from typing import TypeVar

from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Button

ResultT = TypeVar("ResultT")


class FormDialog(ModalScreen[ResultT]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def on_input_submitted(self) -> None:
        self._submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ok":
            self._submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def _submit(self) -> None:
        """Check the form; dismiss with the answer, or say in the dialog what is wrong."""
        raise NotImplementedError
