"""SGLang server processes: launch, health, state machine, restart policy, fleet."""

from __future__ import annotations

from supervisor.servers.endpoint import Endpoint
from supervisor.servers.exit_classifier import ExitKind, ExitReason
from supervisor.servers.fleet import Fleet, FleetOptions, RollingResult
from supervisor.servers.server_state import ServerSnapshot, ServerState

__all__ = ["Endpoint", "ExitKind", "ExitReason", "Fleet", "FleetOptions", "RollingResult",
           "ServerSnapshot", "ServerState"]
