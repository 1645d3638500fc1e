"""The audit trail as it happens, newest first: restarts and their cause, pauses, and every
operator action with who did it."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from supervisor.contract.status import Event
from tui.event_text import describe, who
from tui.formatting import clock, one_line

ALARMING = ("BACKOFF", "FAILED", "UPLOADS STOPPED", "uploads failing", "paused")


class EventList(Widget):
    events: reactive[tuple[Event, ...]] = reactive(())

    def render(self) -> Text:
        lines = [Text(" events", style="bold")]
        room = max(0, self.size.height - 1)
        if not self.events:
            lines.append(Text(" none yet", style="dim"))
        for e in reversed(self.events[-room:] if room else ()):
            what = describe(e)
            line = Text(f" {clock(e.time)} ", style="dim")
            alarming = any(word in what for word in ALARMING)
            # Who first: it is short, and a long description cut at the edge then loses its
            # tail (a loop's snippet), not who acted.
            line.append(who(e), style="cyan" if e.caller else "dim")
            line.append("  ")
            line.append(one_line(what, 240), style="bold red" if alarming else "")
            line.truncate(max(1, self.size.width), overflow="ellipsis")
            lines.append(line)
        return Text("\n").join(lines)
