"""Whether the TUI hears the daemon now, and if not since when and why."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinkState:
    connected: bool
    reason: str = ""              # why not: the client's one-line error
    attempts: int = 0             # failed connection attempts in a row
    since: float | None = None    # monotonic time the link went down (or first tried)
    streaming: bool = True        # False: polling /v1/status (the daemon has no event stream)
    ever_connected: bool = False  # False: still waiting for the first answer since start

    @classmethod
    def connecting(cls) -> LinkState:
        return cls(connected=False, reason="connecting")
