"""A server's snapshot as the daemon keeps it; its states are the contract's enum, shared with clients."""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.control.contract import ServerState

__all__ = ["ServerSnapshot", "ServerState"]


@dataclass(frozen=True)
class ServerSnapshot:
    name: str
    gpus: tuple[int, ...]
    port: int
    state: ServerState
    pid: int | None
    in_flight: int
    restarts: int
    last_exit_reason: str | None
    state_since: float          # unix seconds
    max_running: int
    argv: tuple[str, ...]
    # Why the server is in its state ("oom: ... ; restarting in 20 s"), for the TUI.
    state_reason: str = ""
    failures_in_window: int = 0
