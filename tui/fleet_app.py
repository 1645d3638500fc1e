"""`dflash-tui --socket A --socket B ...`: many nodes of one job. The fleet screen shows one
row per node; Enter opens that node's usual main screen (every key works there, on that
node), Escape comes back. Each node is followed by its own feed worker, so one slow or
lost node never holds up the others' rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.reactive import reactive

from supervisor.client.fleet_totals import NodeRow
from supervisor.contract.status import Event, Status
from tui.client_protocol import DaemonClient
from tui.event_log import EventLog
from tui.link_state import LinkState
from tui.screens.fleet_screen import FleetScreen
from tui.screens.main_screen import MainScreen
from tui.status_feed import FeedTiming, follow


@dataclass
class NodeFeed:
    daemon: DaemonClient
    status: Status | None = None
    link: LinkState = field(default_factory=LinkState.connecting)
    events: EventLog = field(default_factory=EventLog)

    def row(self) -> NodeRow:
        if not self.link.connected and self.link.reason != "connecting":
            if self.status is not None and NodeRow.finished(self.status):
                # Gone after saying it was done: it finished and exited, figures final.
                return NodeRow(self.daemon.socket, self.status, self.link.reason, exited=True)
            return NodeRow(self.daemon.socket, None, self.link.reason)
        if self.status is None:
            return NodeRow(self.daemon.socket, None, "connecting")
        return NodeRow(self.daemon.socket, self.status)


class FleetTui(App[None]):
    CSS_PATH = Path(__file__).with_name("dflash.tcss")
    TITLE = "dflash-tui"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [Binding("escape", "back", "fleet", tooltip="back to every node")]

    nodes: reactive[tuple[NodeRow, ...]] = reactive(())
    # What the open node's main screen is bound to (the single-daemon app's names).
    status: reactive[Status | None] = reactive(None)
    link: reactive[LinkState] = reactive(LinkState.connecting)
    events: reactive[tuple[Event, ...]] = reactive(())

    def __init__(self, daemons: list[DaemonClient], *, readonly: bool = False,
                 timing: FeedTiming = FeedTiming()) -> None:
        super().__init__()
        self.readonly = readonly
        self.timing = timing
        self.feeds = [NodeFeed(d) for d in daemons]
        self.selected: int | None = None

    def on_mount(self) -> None:
        self.push_screen(FleetScreen(self.readonly).data_bind(FleetTui.nodes))
        for i in range(len(self.feeds)):
            self.follow_node(i)

    async def on_unmount(self) -> None:
        for feed in self.feeds:
            await feed.daemon.aclose()

    @work(group="feeds")
    async def follow_node(self, index: int) -> None:
        feed = self.feeds[index]

        def got_status(status: Status) -> None:
            feed.status = status
            feed.events.merge(status.recent_events)
            self._changed(index)

        def got_event(event: Event) -> None:
            feed.events.merge((event,))
            self._changed(index)

        def got_link(link: LinkState) -> None:
            feed.link = link
            self._changed(index)

        await follow(feed.daemon, on_status=got_status, on_event=got_event, on_link=got_link,
                     timing=self.timing)

    def _changed(self, index: int) -> None:
        self.nodes = tuple(f.row() for f in self.feeds)
        if index == self.selected:
            self._mirror(index)

    def _mirror(self, index: int) -> None:
        """The main screen is bound to the app's status/link/events: they follow the node
        it shows."""
        feed = self.feeds[index]
        self.status, self.link = feed.status, feed.link
        self.events = feed.events.ordered()

    def open_node(self, index: int) -> None:
        """Called on the app's own loop (the screen asks with call_later), so the bindings
        below bind to the app's reactives."""
        self.selected = index
        self._mirror(index)
        self.push_screen(MainScreen(self.feeds[index].daemon, self.readonly).data_bind(
            FleetTui.status, FleetTui.link, FleetTui.events))

    def action_back(self) -> None:
        if isinstance(self.screen, MainScreen):
            self.selected = None
            self.pop_screen()


def make_fleet_app(daemons: list[DaemonClient], *, readonly: bool = False,
                   timing: FeedTiming = FeedTiming()) -> FleetTui:
    return FleetTui(daemons, readonly=readonly, timing=timing)
