"""The tuner (issue 39): the search's state and reason, the canary, the best flags and their
gain, and the trials, from `Status.tuning` as it streams; `s` starts a search (a dialog for
its space and canary), `x` stops it. A read-only TUI sees all of it and has neither key.

It belongs to one main screen (the fleet view has one per node): the status comes from that
screen as it changes, and the actions go through its `act`, so answers and refusals show as
every other action's do."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Static

from supervisor.client.tuning_text import ACTIVE, tune_start_text, tune_stop_text
from supervisor.contract.status import Status
from tui.client_protocol import DaemonClient
from tui.dialogs.tune_start_dialog import TuneStartChoice, TuneStartDialog
from tui.widgets.tuning.trial_table import LEGEND, TrialTable
from tui.widgets.tuning.tuning_summary import TuningSummary

T = TypeVar("T")


class TuningOwner(Protocol):
    """What this screen uses of the main screen it belongs to (main_screen.py is one): said
    here, so the two screens do not import each other."""
    readonly: bool
    status: Status | None          # a reactive the screen watches
    daemon: DaemonClient
    tune_start_dialog: TuneStartDialog

    def act(self, title: str, call: Callable[[], Awaitable[T]],
            say: Callable[[T], str]) -> Any: ...

    def confirm(self, title: str, question: str, yes: str,
                then: Callable[[], object]) -> None: ...


ACTIONS = ("tune_start", "tune_stop")


def searching(status: Status | None) -> bool:
    return status is not None and status.tuning is not None and status.tuning.state in ACTIVE


class TuningScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "back", tooltip="back to the main screen"),
        Binding("s", "tune_start", "start tuning",
                tooltip="start the canary search: its flags and canary (dialog)"),
        Binding("x", "tune_stop", "stop tuning",
                tooltip="stop the search; the canary goes back to the best flags (confirm)"),
    ]

    status: reactive[Status | None] = reactive(None)

    def __init__(self, owner: TuningOwner) -> None:
        super().__init__()
        self.owner = owner
        self._searching: bool | None = None

    def compose(self) -> ComposeResult:
        title = " Tuning: the canary search for faster server flags"
        yield Static(title + ("  (read-only)" if self.owner.readonly else ""),
                     id="tuning-title", markup=False)
        yield TuningSummary(id="tuning-summary").data_bind(TuningScreen.status)
        yield Static(LEGEND, id="tuning-legend", markup=False)
        with VerticalScroll(id="trial-scroll"):
            yield TrialTable(id="trials")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.watch(self.owner, "status", self._follow)

    def _follow(self, status: Status | None) -> None:
        self.status = status

    def watch_status(self, status: Status | None) -> None:
        tuning = status.tuning if status is not None else None
        self.query_one(TrialTable).trials = tuning.trials if tuning is not None else ()
        # Start or stop follows the search. Only on a change: the footer is rebuilt.
        if searching(status) != self._searching:
            self._searching = searching(status)
            self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ACTIONS:
            if self.owner.readonly:
                return False
            return searching(self.status) == (action == "tune_stop")
        return True

    def action_tune_start(self) -> None:
        s = self.status
        servers = tuple(x.name for x in s.servers) if s else ()

        def chosen(choice: TuneStartChoice | None) -> None:
            if choice is not None:
                self.owner.act("tune start", lambda: self.owner.daemon.tune_start(
                    choice.space, server=choice.server, force=choice.force), tune_start_text)

        self.app.push_screen(self.owner.tune_start_dialog.prepare(servers), chosen)

    def action_tune_stop(self) -> None:
        t = self.status.tuning if self.status else None
        doing = f" ({t.state.value} on {t.canary})" if t and t.canary else ""
        self.owner.confirm(
            "Stop tuning", f"Stop the search{doing}? A trial in progress is aborted and its "
            "canary goes back to the best flags known; flags already kept stay.", "Stop",
            lambda: self.owner.act("tune stop", self.owner.daemon.tune_stop, tune_stop_text))
