"""What the fleet, the status snapshot and the control socket ask of a server, whatever its
kind: a server the daemon launched (managed_server.py: spawned, adopted or taken over from
its systemd unit) or one it attached to (attached_server.py: someone else's URL). Both
compose the same READY life (ready_life.py) and keep their state with transitions.py; each
says for itself which transitions are legal (its table) and, here, what the daemon may do to
it: `refusal` answers None when an operator's restart, retune or reset may go ahead, else
the one line that says why not."""

from __future__ import annotations

from typing import Protocol

from supervisor.config import ServersSection
from supervisor.servers.ready_life import ReadyLife
from supervisor.servers.server_log import ServerLog
from supervisor.servers.server_state import ServerSnapshot, ServerState
from supervisor.servers.transitions import Transitions


class SupervisedServer(Protocol):
    name: str
    log: ServerLog
    transitions: Transitions
    ready: ReadyLife

    @property
    def state(self) -> ServerState: ...

    @property
    def servers(self) -> ServersSection: ...

    def refusal(self, action: str) -> str | None:
        """Why the daemon may not do `action` ("restart", "retune", "reset") to this
        server; None: it may."""

    def snapshot(self) -> ServerSnapshot: ...

    async def run(self) -> None:
        """Its life cycle, until cancelled (the fleet runs one task per server)."""

    async def wait_changed(self) -> None: ...
