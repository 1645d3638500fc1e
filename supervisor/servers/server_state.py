"""A server's snapshot as the daemon keeps it, and the transitions allowed between its states;
the states are the contract's enum, shared with clients."""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.contract.status import ServerState
from supervisor.servers.sglang_view import SglangView

__all__ = ["ALLOWED_TRANSITIONS", "ATTACHED_TRANSITIONS", "IllegalTransition", "ServerSnapshot", "ServerState",
           "check_transition"]


S = ServerState

# Every transition a server may make; transitions.py checks each one against this table, so a
# life-cycle bug shows up as a clear error at the faulty step instead of as a server in a
# state nothing expects (Supervisor's states.py and _assertInState are the model).
ALLOWED_TRANSITIONS: dict[ServerState, frozenset[ServerState]] = {
    # A start: the first one, a requested restart, after a back-off, or an operator's reset.
    S.STOPPED: frozenset({S.STARTING}),
    # Healthy; or it failed/was asked to restart while loading (STOPPING); or the launch
    # command itself could not be started (straight to BACKOFF/FAILED, nothing to stop);
    # or the daemon shut down before the process was spawned (STOPPED).
    S.STARTING: frozenset({S.READY, S.STOPPING, S.BACKOFF, S.FAILED, S.STOPPED}),
    # An operator's restart drains first; a failure or a shutdown stops at once.
    S.READY: frozenset({S.DRAINING, S.STOPPING}),
    S.DRAINING: frozenset({S.STOPPING}),
    # Stopped as asked, or classified as a failure; STOPPING again when the daemon shuts
    # down while a stop is under way.
    S.STOPPING: frozenset({S.STOPPED, S.BACKOFF, S.FAILED, S.STOPPING}),
    # The next start, or the daemon shut down while waiting.
    S.BACKOFF: frozenset({S.STARTING, S.STOPPED}),
    # Only an operator's reset or restart starts it again.
    S.FAILED: frozenset({S.STARTING, S.STOPPED}),
}


class IllegalTransition(RuntimeError):
    """A server was about to move between states the table does not allow: a bug."""


# An attached server (servers.attach): never launched, restarted or stopped by the daemon.
# STARTING is the first probes; GONE is unreachable, unhealthy or hung, probed until it
# answers again; STOPPED is the daemon's own end (the server itself runs on).
ATTACHED_TRANSITIONS: dict[ServerState, frozenset[ServerState]] = {
    S.STOPPED: frozenset({S.STARTING}),
    S.STARTING: frozenset({S.READY, S.GONE, S.STOPPED}),
    S.READY: frozenset({S.GONE, S.STOPPED}),
    S.GONE: frozenset({S.READY, S.STOPPED}),
}


def check_transition(old: ServerState, new: ServerState,
                     table: dict[ServerState, frozenset[ServerState]] = ALLOWED_TRANSITIONS
                     ) -> None:
    if new not in table.get(old, frozenset()):
        raise IllegalTransition(f"server state {old} -> {new} is not an allowed transition")


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
    sglang: SglangView = SglangView()     # SGLang's own /metrics and the over-commit flag
    # The saturation guard's live limit (None: not serving) and why it is below max_running.
    inflight_limit: int | None = None
    inflight_limit_reason: str | None = None
    # When it last became READY; kept while it drains (it still answers its requests), None
    # once it stops. The TUI's and `status`'s "up".
    ready_since: float | None = None
    # Streamed requests silent while the server streams for others (queued or retracted
    # by SGLang): waiting, not stalled (dispatch/stream_deadlines.py).
    waiting: int = 0
    # Lives in a row that failed before completing an answer (restart_policy.py).
    unserved_in_row: int = 0
    # An attached server's URL (servers.attach); None for the daemon's own.
    attached_url: str | None = None
