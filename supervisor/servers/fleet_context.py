"""What every server of a fleet shares, whatever its kind (fleet.py makes one for all)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from supervisor.servers.dispatcher_view import Dispatching
from supervisor.servers.launcher import Launcher


@dataclass
class FleetContext:
    store_call: Callable[..., Any]        # async (Store.method, *args) -> result
    dispatcher: Dispatching
    client: httpx.AsyncClient
    clock: Callable[[], float]            # unix seconds, for events and snapshots
    monotonic: Callable[[], float]        # for the restart policy's failure window
    on_change: Callable[[], None]
    proc_limiter: anyio.CapacityLimiter   # threads that spawn/stop processes
    launcher: Launcher                    # how servers are started, found, stopped
    base_env: dict[str, str] | None = None
    cwd: str | None = None
    exit_poll_s: float = 0.2
    startup_probe_s: float = 1.0
    kill_wait_s: float = 10.0
    # This job's token, in every server's environment (adoption.py: a later daemon's proof).
    job_token: str = ""
    # Read as the fleet is cancelled: True leaves the servers running for the next daemon.
    keep_on_exit: Callable[[], bool] = lambda: False
