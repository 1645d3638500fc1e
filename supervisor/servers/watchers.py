"""Where a dead, unhealthy or hung server is detected: the watchers that run beside a READY
server, each ending the server's life by deciding why (the first decision wins).

- exit: the process ended (polled: the process group is ours, a wait in a thread would
  pin a worker per server).
- health: /health_generate failing `health_failures` times in a row.
- progress: requests in flight and none completing for `hang_timeout_s` (a server can
  answer health checks and make no progress), or the dispatcher saw several of its streamed
  requests stall (dispatch/stall_watch.py sets `hung` on the server's progress).
- requests: an operator's restart (drained first by the server's life cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import anyio
import httpx

from supervisor.config import ServersSection
from supervisor.servers.exit_classifier import Trigger, describe_returncode
from supervisor.servers.health import probe
from supervisor.servers.process_group import ServerProcess


@dataclass(frozen=True)
class Request:
    """An operator's action on one server."""
    kind: str      # "restart" or "reset"
    actor: str
    reason: str


@dataclass(frozen=True)
class Failure:
    trigger: Trigger
    detail: str
    # Restarting cannot help (our port answered by another program): FAILED at once,
    # waiting for an operator, instead of a restart loop.
    give_up: bool = False


@dataclass
class Decision:
    """Why a READY server's life ends; deciding cancels the watchers' scope."""
    outcome: Request | Failure | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def decide(self, outcome: Request | Failure) -> None:
        if self.outcome is None:
            self.outcome = outcome
        self.scope.cancel()


async def watch_exit(proc: ServerProcess, decision: Decision, poll_s: float) -> None:
    while True:
        rc = proc.returncode
        if rc is not None:
            decision.decide(Failure(Trigger.EXITED, describe_returncode(rc)))
            return
        await anyio.sleep(poll_s)


async def watch_health(name: str, client: httpx.AsyncClient, base_url: str,
                       s: ServersSection, decision: Decision, log: Any) -> None:
    failures = 0
    while True:
        await anyio.sleep(s.health_interval_s)
        ok, detail = await probe(client, base_url, s.health_timeout_s)
        if ok:
            failures = 0
            continue
        failures += 1
        log.warning("%s: health probe failed (%d/%d): %s", name, failures,
                    s.health_failures, detail)
        if failures >= s.health_failures:
            decision.decide(Failure(
                Trigger.HEALTH, f"health probe failed {failures} times in a row ({detail})"))
            return


async def watch_progress(progress: Callable[[], Any], s: ServersSection,
                         decision: Decision) -> None:
    """Hung-but-healthy: requests in flight and the completed count not moving. Measured
    from when we first saw the server busy without progress, so a job that was paused for
    an hour does not look hung the moment work resumes. `progress()` returns the server's
    dispatch counters (in_flight, completed)."""
    interval = max(0.05, min(s.health_interval_s, s.hang_timeout_s / 4))
    busy_since: float | None = None
    last_completed: int | None = None
    while True:
        await anyio.sleep(interval)
        p = progress()
        hung = getattr(p, "hung", None)
        if hung:
            # The dispatcher saw requests stall one by one (dispatch/stall_watch.py); each
            # stall ends its request, so the completed count below keeps moving.
            decision.decide(Failure(Trigger.PROGRESS, hung))
            return
        now = anyio.current_time()
        if p.in_flight == 0 or p.completed != last_completed:
            last_completed = p.completed
            busy_since = now if p.in_flight > 0 else None
            continue
        if busy_since is None:
            busy_since = now
        if now - busy_since >= s.hang_timeout_s:
            decision.decide(Failure(
                Trigger.PROGRESS,
                f"{p.in_flight} requests in flight, none completed for {now - busy_since:.0f} s"))
            return


async def watch_requests(wait_request: Callable[[], Awaitable[Request | None]],
                         decision: Decision) -> None:
    while True:
        req = await wait_request()
        if req is not None and req.kind == "restart":
            decision.decide(req)
            return
        # A reset of a server that is not FAILED means nothing.
