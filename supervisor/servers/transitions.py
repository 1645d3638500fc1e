"""One server's state as the daemon keeps it, moved only along its kind's table
(server_state.py: ALLOWED_TRANSITIONS for a server the daemon launched, ATTACHED_TRANSITIONS
for one it attached to). Each move is checked first, so a life-cycle bug is a clear error at
the faulty step, then said in one log line, recorded as a `server_state` event, and wakes
whoever waits for a change (a rolling restart, the fleet). The server's other events go to
the same table under its name."""

from __future__ import annotations

import logging
from typing import Any

import anyio

from state.store import Store
from supervisor.contract.event_kinds import EventKind
from supervisor.servers.fleet_context import FleetContext
from supervisor.servers.server_state import ServerState, check_transition

log = logging.getLogger("supervisor.servers")

S = ServerState


class Transitions:
    def __init__(self, name: str, table: dict[ServerState, frozenset[ServerState]],
                 ctx: FleetContext) -> None:
        self.name = name
        self.table = table
        self._ctx = ctx
        self.state = S.STOPPED
        self.since = ctx.clock()
        self.reason = "not started"
        # When it last became READY; kept while it drains (it still answers its requests).
        self.ready_since: float | None = None
        self._changed = anyio.Event()

    def fields(self) -> dict[str, Any]:
        """The snapshot's state fields (server_state.py ServerSnapshot)."""
        return {"state": self.state, "state_since": self.since, "state_reason": self.reason,
                "ready_since": self.ready_since}

    async def wait_changed(self) -> None:
        await self._changed.wait()

    async def event(self, kind: str, detail: dict[str, Any]) -> None:
        await self._ctx.store_call(Store.add_event, kind, self.name, detail, "supervisor",
                                   self._ctx.clock())

    async def to(self, new: ServerState, reason: str, actor: str = "supervisor",
                 **detail: Any) -> None:
        old = self.state
        check_transition(old, new, self.table)
        self.state, self.since, self.reason = new, self._ctx.clock(), reason
        if new is S.READY:
            self.ready_since = self.since
        elif new is not S.DRAINING:
            self.ready_since = None
        failing = new in (S.BACKOFF, S.FAILED, S.GONE) or (new is S.STOPPING and actor == "supervisor"
                                                   and reason != "supervisor shutting down")
        log.log(logging.WARNING if failing else logging.INFO, "%s: %s -> %s: %s",
                self.name, old, new, reason)
        self._changed.set()
        self._changed = anyio.Event()
        self._ctx.on_change()
        event = {"from": old.value, "to": new.value, "reason": reason, **detail}
        with anyio.CancelScope(shield=True):
            await self._ctx.store_call(Store.add_event, EventKind.SERVER_STATE, self.name, event,
                                       actor, self.since)
