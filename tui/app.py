"""`dflash-tui [--socket PATH] [--readonly]`: the operator's live view of a running daemon
(`--socket` once per node: the fleet screen of a many-node job, `tui/fleet_app.py`).

`make_app(daemon)` builds the app around any client with the `DaemonClient` operations
(tui/client_protocol.py: the real control-socket client in use, a fake with fixed data in
tests). The app owns the feed from the daemon and hands the data down to the main screen; it
never touches the daemon's state DB, GPUs or object store.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from textual import work
from textual.app import App
from textual.reactive import reactive

from supervisor.client.control_client import default_socket_path
from supervisor.contract.status import Event, Status
from tui.client_protocol import DaemonClient, connect
from tui.event_log import EventLog
from tui.link_state import LinkState
from tui.screens.help_screen import QUIT_ENDS_DEMO, QUIT_LEAVES_DAEMON
from tui.screens.main_screen import MainScreen
from tui.status_feed import FeedTiming, follow


class DflashTui(App[None]):
    CSS_PATH = Path(__file__).with_name("dflash.tcss")
    TITLE = "dflash-tui"
    ENABLE_COMMAND_PALETTE = False

    status: reactive[Status | None] = reactive(None)
    link: reactive[LinkState] = reactive(LinkState.connecting)
    events: reactive[tuple[Event, ...]] = reactive(())

    def __init__(self, daemon: DaemonClient, *, readonly: bool = False,
                 timing: FeedTiming = FeedTiming(), quit_text: str = QUIT_LEAVES_DAEMON) -> None:
        super().__init__()
        self.daemon = daemon
        self.readonly = readonly
        self.quit_text = quit_text
        self.timing = timing
        self._events = EventLog()

    def on_mount(self) -> None:
        self.push_screen(MainScreen(self.daemon, self.readonly, self.quit_text).data_bind(
            DflashTui.status, DflashTui.link, DflashTui.events))
        self.follow_daemon()

    async def on_unmount(self) -> None:
        await self.daemon.aclose()

    @work(exclusive=True, group="feed")
    async def follow_daemon(self) -> None:
        await follow(self.daemon, on_status=self._got_status, on_event=self._got_event,
                     on_link=self._got_link, timing=self.timing)

    def _got_status(self, status: Status) -> None:
        self.status = status
        self._merge(status.recent_events)

    def _got_event(self, event: Event) -> None:
        self._merge((event,))

    def _got_link(self, link: LinkState) -> None:
        self.link = link

    def _merge(self, events: tuple[Event, ...]) -> None:
        if self._events.merge(events):
            self.events = self._events.ordered()


def make_app(daemon: DaemonClient, *, readonly: bool = False,
             timing: FeedTiming = FeedTiming(), demo: bool = False) -> DflashTui:
    return DflashTui(daemon, readonly=readonly, timing=timing,
                     quit_text=QUIT_ENDS_DEMO if demo else QUIT_LEAVES_DAEMON)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dflash-tui", description="Watch and steer a running dflash-supervisor daemon.")
    parser.add_argument("--socket", action="append",
                        help=f"the daemon's control socket (default: {default_socket_path()}); "
                             "once per node for a many-node job's fleet screen")
    parser.add_argument("--readonly", action="store_true",
                        help="watch only: hide and disable every action key")
    parser.add_argument("--demo", action="store_true",
                        help="set by `dflash-supervisor demo --tui`, which stops its daemon when "
                             "this TUI quits: the help screen says so")
    args = parser.parse_args(argv)
    sockets = args.socket or [None]
    if len(sockets) > 1:
        from tui.fleet_app import make_fleet_app
        make_fleet_app([connect(s) for s in sockets], readonly=args.readonly).run()
        return 0
    make_app(connect(sockets[0]), readonly=args.readonly, demo=args.demo).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
