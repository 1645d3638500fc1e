"""Retune SGLang flags: lists what the selected server runs with, takes `name=value` changes,
and applies them to that server or to all (a rolling restart either way).
Installed once; `prepare(server)` before each push."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Checkbox, Input, Static

from supervisor.contract.status import FlagValue, ServerStatus
from tui.dialogs.form_dialog import FormDialog
from tui.flag_text import FlagSyntaxError, parse_flags, show_flags


@dataclass(frozen=True)
class RetuneChoice:
    flags: dict[str, FlagValue | None]
    server: str | None          # None: every server, one at a time
    add: bool                   # allow flags the servers do not run with yet


class RetuneDialog(FormDialog[RetuneChoice | None]):

    server: ServerStatus

    def prepare(self, server: ServerStatus) -> RetuneDialog:
        self.server = server
        return self

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            with VerticalScroll(id="current-flags"):
                yield Static("", markup=False, id="flags-now")
            yield Static("Changes, as name=value (an empty value removes a flag; quote a "
                         "repeated value: cuda-graph-bs='1 2 4 8'):",
                         classes="dialog-text")
            yield Input(placeholder="max-running-requests=48 mem-fraction-static=0.85",
                        id="flags")
            yield Checkbox("", value=False, id="only")
            yield Checkbox("Allow flags not set yet (a typo guard otherwise)", value=False,
                           id="add")
            yield Static("", id="error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Retune (enter)", variant="warning", id="ok")
                yield Button("Cancel (esc)", id="cancel")

    def on_screen_resume(self) -> None:
        name = self.server.name
        self.query_one(".dialog").border_title = f"Retune flags ({name} runs with)"
        self.query_one("#flags-now", Static).update(show_flags(self.server.flags))
        only = self.query_one("#only", Checkbox)
        only.label = f"Only {name} (otherwise all servers, one at a time)"
        only.value = False
        self.query_one("#add", Checkbox).value = False
        self.query_one("#error", Static).update("")
        field = self.query_one("#flags", Input)
        field.value = ""
        field.focus()

    def _submit(self) -> None:
        try:
            flags = parse_flags(self.query_one("#flags", Input).value)
        except FlagSyntaxError as exc:
            self.query_one("#error", Static).update(str(exc))
            return
        only = self.query_one("#only", Checkbox).value
        self.dismiss(RetuneChoice(flags, self.server.name if only else None,
                                  self.query_one("#add", Checkbox).value))
