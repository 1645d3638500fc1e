"""The dispatcher as the servers see it: what a READY life asks of it and what it reads of its
per-server progress record. Declared here, below the dispatcher (dispatch/dispatcher.py and
dispatch/dispatch_snapshot.py ServerProgress implement them), so the servers never import
it; every member named here is one the servers use, and none is reached for past it.
Runtime-checkable, so a test can hold the dispatcher and its test twin to all of it."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import anyio

from supervisor.servers.endpoint import Endpoint
from supervisor.servers.inflight_limit import InFlightLimit


@runtime_checkable
class ServerProgressView(Protocol):
    """One server's progress record, written by the dispatcher."""
    in_flight: int
    completed: int
    answered: int             # of them, answers recorded done (a life that answered served)
    hung: str | None          # set when its streams stalled while it made no token
    rates: Any                # its completion-rate window (None before the first answer)
    # The newest token any of its streams made this life (monotonic; None: none yet), and
    # how many of its streams wait while it streams for others (queued or retracted).
    last_token_at: float | None
    waiting: int


@runtime_checkable
class Dispatching(Protocol):
    """Keep a READY server's slots full until it drains; how its requests are going (its
    slots, the hang watch, the status); its live in-flight limit (the saturation guard moves
    it); and the job's live max tokens (SGLang's KV pool bounds its slots at that size)."""

    @property
    def max_tokens(self) -> int: ...

    async def serve(self, endpoint: Endpoint, draining: anyio.Event) -> None: ...

    def progress(self, name: str) -> ServerProgressView:
        """The server's record, made at the first ask (a server not served yet has one)."""

    def inflight_limit(self, server: str) -> InFlightLimit | None: ...
