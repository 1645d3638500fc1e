"""Start the tuner: the search space (`FLAG=V1,V2 ...`, empty: the daemon's default), the
canary (empty: the tuner picks one) and whether to tune where it does not pay.
Installed once; `prepare(servers)` before each push."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Checkbox, Input, Static

from supervisor.client.flag_space import SpaceSyntaxError, parse_space
from supervisor.contract.tuning import FlagRange
from tui.dialogs.form_dialog import FormDialog


@dataclass(frozen=True)
class TuneStartChoice:
    space: tuple[FlagRange, ...]    # (): the daemon's default space
    server: str | None              # None: the tuner picks the canary
    force: bool


class TuneStartDialog(FormDialog[TuneStartChoice | None]):

    servers: tuple[str, ...] = ()

    def prepare(self, servers: tuple[str, ...]) -> TuneStartDialog:
        self.servers = servers
        return self

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide") as box:
            box.border_title = "Start tuning"
            yield Static("Flags to search, each with its values in the order tried (empty: "
                         "the daemon's default space):", classes="dialog-text")
            yield Input(placeholder="max-running-requests=32,48,64 mem-fraction-static=0.9,0.93",
                        id="space")
            yield Static("", classes="dialog-note", id="servers", markup=False)
            yield Input(placeholder="gpu0", id="server")
            yield Checkbox("Tune even where the remaining job does not pay for a trial",
                           value=False, id="force")
            yield Static("", id="error", classes="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Start (enter)", variant="warning", id="ok")
                yield Button("Cancel (esc)", id="cancel")

    def on_screen_resume(self) -> None:
        self.query_one("#servers", Static).update(
            "Canary (empty: the tuner picks one): " + (", ".join(self.servers) or "--"))
        self.query_one("#server", Input).value = ""
        self.query_one("#force", Checkbox).value = False
        self.query_one("#error", Static).update("")
        field = self.query_one("#space", Input)
        field.value = ""
        field.focus()

    def _submit(self) -> None:
        error = self.query_one("#error", Static)
        try:
            space = parse_space(self.query_one("#space", Input).value)
        except SpaceSyntaxError as exc:
            error.update(str(exc))
            return
        server = self.query_one("#server", Input).value.strip() or None
        if server is not None and self.servers and server not in self.servers:
            error.update(f"no server named {server!r}")
            return
        self.dismiss(TuneStartChoice(space, server, self.query_one("#force", Checkbox).value))
