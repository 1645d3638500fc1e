"""A server's states and the frozen snapshot the daemon publishes about it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ServerState(StrEnum):
    STARTING = "STARTING"   # launched, waiting for /health_generate to answer 200
    READY = "READY"         # serving: the dispatcher keeps its slots full
    DRAINING = "DRAINING"   # no new requests; waiting for in-flight ones (restart/retune)
    STOPPING = "STOPPING"   # signalling the process group
    STOPPED = "STOPPED"     # no process (between a requested stop and the next start, or at exit)
    BACKOFF = "BACKOFF"     # failed; waiting before the next start
    FAILED = "FAILED"       # failed too often; waits for an operator's reset/restart


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
