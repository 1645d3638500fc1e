"""A server's log, scrolling, refreshed while the view sits at its end (like `tail -f`;
scroll up to read and it holds still)."""

from __future__ import annotations

import anyio
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Log, Static

from supervisor.client.control_client import ControlError
from tui.client_protocol import DaemonClient

LINES = 1000
REFRESH_S = 2.0


class ServerLogScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back"),
        Binding("end,G", "follow", "Follow"),
    ]

    def __init__(self, daemon: DaemonClient, server: str) -> None:
        super().__init__()
        self.daemon = daemon
        self.server = server
        self._shown: tuple[str, ...] = ()

    def compose(self) -> ComposeResult:
        yield Static(f" log of {self.server}: loading…", id="log-title", markup=False)
        yield Log(id="log", max_lines=LINES * 2)
        yield Footer()

    def on_mount(self) -> None:
        self.follow_log()

    @work(exclusive=True, group="log")
    async def follow_log(self) -> None:
        # Each fetch schedules the next only once it has answered: a slow daemon slows the
        # refresh down instead of piling up requests.
        title = self.query_one("#log-title", Static)
        log = self.query_one("#log", Log)
        while True:
            try:
                tail = await self.daemon.log(self.server, LINES)
            except ControlError as exc:
                title.update(f" log of {self.server}: {exc}")
            else:
                at_end = log.is_vertical_scroll_end or not self._shown
                if at_end and tail.lines != self._shown:
                    log.clear()
                    log.write_lines(tail.lines)
                    log.scroll_end(animate=False)
                    self._shown = tail.lines
                state = "following" if at_end else "held (End to follow)"
                title.update(f" log of {self.server}: {tail.path} · "
                             f"last {len(tail.lines)} lines · {state}")
            await anyio.sleep(REFRESH_S)

    def action_follow(self) -> None:
        self.query_one("#log", Log).scroll_end(animate=False)
