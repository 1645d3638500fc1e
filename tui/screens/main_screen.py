"""The main screen: the job, its servers, uploads and events, and the operator's keys.

Data comes down from the app (`status`, `link`, `events`) and is bound into each widget;
the keys open dialogs and the answers go to the daemon in workers, so no key ever waits on
the socket. Each action's answer, or the daemon's refusal, shows as a notification.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer

from supervisor.client.control_client import ControlError, ControlRefused
from supervisor.contract.status import Event, ServerState, Status
from tui import answer_text
from tui.alerts import Alert, alerts
from tui.client_protocol import DaemonClient
from tui.dialogs.confirm_dialog import ConfirmDialog
from tui.dialogs.max_tokens_dialog import MaxTokensChoice, MaxTokensDialog
from tui.dialogs.pause_dialog import PauseDialog
from tui.dialogs.retune_dialog import RetuneChoice, RetuneDialog
from tui.dialogs.tune_start_dialog import TuneStartDialog
from tui.link_state import LinkState
from tui.screens.help_screen import QUIT_LEAVES_DAEMON, HelpScreen
from tui.screens.server_log_screen import ServerLogScreen
from tui.screens.tuning_screen import TuningScreen
from tui.widgets.activity.event_list import EventList
from tui.widgets.activity.upload_panel import UploadPanel
from tui.widgets.alert_banner import AlertBanner
from tui.widgets.job.job_progress import JobProgress
from tui.widgets.job.length_histogram import LengthHistogram
from tui.widgets.job.throughput_sparkline import ThroughputSparkline
from tui.widgets.servers.server_table import ServerTable
from tui.widgets.title_bar import TitleBar

T = TypeVar("T")

# Under this many rows the charts shrink and the gaps between regions go, so that eight
# servers and some events still fit (80x24 and 100x30 are both "short").
SHORT_ROWS = 36
TINY_ROWS = 27      # 80x24: the charts lose another row


class MainScreen(Screen[None]):
    BINDINGS = [
        Binding("m", "max_tokens", "max tok",
                tooltip="set max tokens live; continue or requeue truncated answers"),
        Binding("u", "requeue", "requeue",
                tooltip="requeue prompts truncated under a lower limit (confirm)"),
        Binding("U", "requeue_with_loops", "requeue + loops", show=False,
                tooltip="the same, answers caught looping included (confirm)"),
        Binding("p", "pause", "pause", tooltip="pause dispatch, with a reason"),
        Binding("p", "resume", "resume", tooltip="resume dispatch"),
        Binding("R", "restart_all", "restart all",
                tooltip="rolling restart of every server (confirm)"),
        # Not in the footer (80 columns are full: quit would be cut); `?` lists it.
        Binding("T", "tuning", "tuning", show=False,
                tooltip="the tuner: its search and trials; start or stop it there"),
        Binding("question_mark", "help", "help", key_display="?", tooltip="this screen"),
        Binding("q", "app.quit", "quit", tooltip=QUIT_LEAVES_DAEMON),
    ]

    status: reactive[Status | None] = reactive(None)
    link: reactive[LinkState] = reactive(LinkState.connecting)
    events: reactive[tuple[Event, ...]] = reactive(())
    alerts: reactive[tuple[Alert, ...]] = reactive(())

    def __init__(self, daemon: DaemonClient, readonly: bool = False,
                 quit_text: str = QUIT_LEAVES_DAEMON) -> None:
        super().__init__()
        self.daemon = daemon
        self.readonly = readonly
        self._paused_shown = False
        # Built once and reused: opening a composed, styled dialog again costs a fraction of
        # building it (a key press should show its answer within ~100 ms).
        self.confirm_dialog = ConfirmDialog()
        self.max_tokens_dialog = MaxTokensDialog()
        self.pause_dialog = PauseDialog()
        self.retune_dialog = RetuneDialog()
        self.tune_start_dialog = TuneStartDialog()
        self.help_screen = HelpScreen(ServerTable.BINDINGS + self.BINDINGS, readonly, quit_text)

    def _dialogs(self) -> tuple[Screen[object], ...]:
        return (self.confirm_dialog, self.max_tokens_dialog, self.pause_dialog,
                self.retune_dialog, self.tune_start_dialog, self.help_screen)

    def on_mount(self) -> None:
        # Installed, a dialog survives being dismissed; one set per main screen (the fleet
        # view opens one main screen per node).
        for dialog in self._dialogs():
            self.app.install_screen(dialog, name=f"{type(dialog).__name__}-{id(self)}")

    def on_unmount(self) -> None:
        for dialog in self._dialogs():
            if dialog not in self.app.screen_stack:    # at exit one may still be open
                self.app.uninstall_screen(dialog)

    def compute_alerts(self) -> tuple[Alert, ...]:
        return alerts(self.status, self.link, self.events)

    def compose(self) -> ComposeResult:
        yield TitleBar(self.daemon.socket, self.readonly).data_bind(
            MainScreen.status, MainScreen.link)
        yield AlertBanner().data_bind(MainScreen.alerts)
        yield JobProgress().data_bind(MainScreen.status)
        with Horizontal(id="charts"):
            yield ThroughputSparkline().data_bind(MainScreen.status)
            yield LengthHistogram().data_bind(MainScreen.status)
        yield ServerTable(self.readonly).data_bind(MainScreen.status)
        yield UploadPanel().data_bind(MainScreen.status)
        yield EventList().data_bind(MainScreen.events)
        yield Footer(compact=True)

    def on_resize(self) -> None:
        self.set_class(self.size.height < SHORT_ROWS, "-short")
        self.set_class(self.size.height < TINY_ROWS, "-tiny")

    def watch_status(self, status: Status | None) -> None:
        # Pause/resume follow the daemon's state. Only on a change: refreshing the bindings
        # rebuilds the footer, the costliest thing on this screen.
        paused = status is not None and bool(status.paused)
        if paused != self._paused_shown:
            self._paused_shown = paused
            self.refresh_bindings()

    # -- which keys are offered ---------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("max_tokens", "requeue", "requeue_with_loops", "pause", "resume",
                      "restart_all"):
            if self.readonly:
                return False
            if action in ("pause", "resume"):
                # One key: pause while dispatching, resume while anything holds it paused.
                paused = self.status is not None and bool(self.status.paused)
                return paused if action == "resume" else not paused
        return True

    # -- the daemon's answers -----------------------------------------------------------------

    @work(group="actions")
    async def act(self, title: str, call: Callable[[], Awaitable[T]],
                  say: Callable[[T], str]) -> None:
        try:
            result = await call()
        except ControlRefused as exc:
            self.notify(f"refused: {exc.reason}", title=title, severity="error", timeout=10)
        except ControlError as exc:
            self.notify(str(exc), title=title, severity="error", timeout=10)
        else:
            self.notify(say(result), title=title, timeout=8)

    # -- job-wide keys ------------------------------------------------------------------------

    def action_max_tokens(self) -> None:
        s = self.status
        if s is None:
            return

        # The count the dialog shows is the count requeued: the same snapshot's figure.
        shown = s.job.truncated

        def chosen(choice: MaxTokensChoice | None) -> None:
            if choice is not None:
                self.act("max tokens", lambda: self.daemon.set_max_tokens(
                    choice.value, requeue_truncated=choice.requeue_truncated,
                    continue_truncated=choice.continue_truncated,
                    requeue_at_most=shown if choice.requeue_truncated else None),
                    answer_text.max_tokens)

        self.app.push_screen(self.max_tokens_dialog.prepare(
            s.max_tokens, s.context_length, s.job.truncated, s.continuation), chosen)

    def action_requeue(self) -> None:
        s = self.status
        if s is None:
            return
        n = s.job.requeueable_truncated
        if n == 0:
            # Nothing to confirm: say why, and what would make a requeue worth it.
            self.notify(f"Nothing to requeue: no answer was cut off under a lower limit than "
                        f"{s.max_tokens:,} tokens. Raise max tokens first (m).",
                        title="requeue truncated")
            return
        how_many = f"{n:,} prompts" if n is not None else "every prompt"
        self.confirm(
            "Requeue truncated",
            f"Send {how_many} cut off under a lower limit than {s.max_tokens:,} tokens back "
            "to pending? Each new answer replaces the old line in its shard. Answers caught "
            "looping stay as they are: they would loop again.",
            "Requeue", lambda: self._send_requeue(include_loops=False))

    def action_requeue_with_loops(self) -> None:
        s = self.status
        if s is None:
            return
        caught = s.quality.looping_total
        loops = f" ({caught:,} caught looping so far)" if caught else ""
        self.confirm(
            "Requeue truncated, loops included",
            f"Send every prompt cut off under a lower limit than {s.max_tokens:,} tokens back "
            f"to pending, answers caught looping included{loops}? A looping answer usually "
            "loops again, to the new limit.",
            "Requeue all", lambda: self._send_requeue(include_loops=True))

    def _send_requeue(self, *, include_loops: bool) -> None:
        self.act("requeue truncated",
                 lambda: self.daemon.requeue_truncated(include_loops=include_loops),
                 answer_text.requeue)

    def action_pause(self) -> None:
        def chosen(reason: str | None) -> None:
            if reason is not None:
                self.act("pause", lambda: self.daemon.pause(reason), answer_text.pause)

        self.app.push_screen(self.pause_dialog, chosen)

    def action_resume(self) -> None:
        s = self.status
        why = "; ".join(f"{p.source}: {p.reason}" for p in s.paused) if s else ""
        self.confirm("Resume", f"Resume dispatch? Paused by {why}.", "Resume",
                      lambda: self.act("resume", self.daemon.resume, answer_text.resume))

    def action_restart_all(self) -> None:
        s = self.status
        names = ", ".join(x.name for x in s.servers) if s else ""
        self.confirm("Rolling restart",
                      f"Restart every server, one at a time, each READY before the next "
                      f"({names})? In-flight requests finish first.", "Restart all",
                      lambda: self.act("restart all", lambda: self.daemon.restart(None),
                                       answer_text.restart))

    def action_tuning(self) -> None:
        self.app.push_screen(TuningScreen(self))

    def action_help(self) -> None:
        self.app.push_screen(self.help_screen)

    # -- keys on the selected server (messages from the table) ------------------------------

    @on(ServerTable.RestartRequested)
    def restart_server(self, event: ServerTable.RestartRequested) -> None:
        name = event.server.name
        if event.server.attached_url is not None:
            # The daemon would refuse it (409): said at once, no confirm to click through.
            self.notify(f"{name} is attached ({event.server.attached_url}): the daemon never "
                        "restarts it; restart it where it runs", title="restart",
                        severity="warning")
            return
        self.confirm("Restart server",
                      f"Restart {name} ({event.server.state.value})? Its in-flight requests "
                      "finish first, then it stops and starts again.", "Restart",
                      lambda: self.act(f"restart {name}", lambda: self.daemon.restart(name),
                                       answer_text.restart))

    @on(ServerTable.ResetRequested)
    def reset_server(self, event: ServerTable.ResetRequested) -> None:
        name = event.server.name
        if event.server.state is not ServerState.FAILED:
            self.notify(f"{name} is {event.server.state.value}, not FAILED", title="reset")
            return
        self.confirm("Reset FAILED server",
                      f"Clear {name}'s failure history and start it again? It failed with: "
                      f"{event.server.state_reason}", "Reset",
                      lambda: self.act(f"reset {name}", lambda: self.daemon.reset(name),
                                       answer_text.reset))

    @on(ServerTable.RetuneRequested)
    def retune(self, event: ServerTable.RetuneRequested) -> None:
        def chosen(choice: RetuneChoice | None) -> None:
            if choice is not None:
                self.act("retune", lambda: self.daemon.retune(
                    choice.flags, server=choice.server, add=choice.add), answer_text.retune)

        self.app.push_screen(self.retune_dialog.prepare(event.server), chosen)

    @on(ServerTable.LogRequested)
    def show_log(self, event: ServerTable.LogRequested) -> None:
        self.app.push_screen(ServerLogScreen(self.daemon, event.server.name))

    def confirm(self, title: str, question: str, yes: str,
                 then: Callable[[], object]) -> None:
        def answered(ok: bool | None) -> None:
            if ok:
                then()

        self.app.push_screen(self.confirm_dialog.ask(title, question, yes), answered)
