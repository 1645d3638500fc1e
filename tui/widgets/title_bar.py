"""The top line: which daemon this is, and whether the figures below are live."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from supervisor.client.text import duration
from supervisor.contract.status import Status
from tui.link_state import LinkState


class TitleBar(Widget):
    status: reactive[Status | None] = reactive(None)
    link: reactive[LinkState] = reactive(LinkState.connecting)

    def __init__(self, socket: str, readonly: bool, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.socket = socket
        self.readonly = readonly

    def render(self) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" dflash-supervisor", style="bold")
        s = self.status
        if s is not None:
            t.append(f"  {s.model}")
            t.append(f"  pid {s.daemon_pid}  up {duration(s.time - s.started_at)}", style="dim")
        t.append(f"  {self.socket}", style="dim")
        right = Text()
        if self.link.connected:
            right.append(" ● live" if self.link.streaming else " ● polling", style="bold green")
        elif self.link.reason == "connecting" or not self.link.ever_connected:
            right.append(" ○ waiting", style="bold yellow")
        else:
            right.append(" ○ disconnected", style="bold red")
        if self.readonly:
            right.append("  read-only", style="bold yellow")
        right.append(" ")
        room = max(0, self.size.width - right.cell_len)
        t.truncate(room, overflow="ellipsis", pad=True)
        return t + right
