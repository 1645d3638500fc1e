"""Where a dead, unhealthy or hung server is detected: the watchers that run beside a READY
server, each ending the server's life by deciding why (the first decision wins).

- exit: the process ended (polled: the process group is ours, a wait in a thread would
  pin a worker per server).
- health: /health_generate failing `health_failures` times in a row.
- progress: requests in flight and no token from the server for `hang_timeout_s` (a server
  can answer health checks and make no progress; hang_rule.py), or the dispatcher saw
  several of its streamed requests stall while the server made no token for anyone
  (dispatch/stall_watch.py sets `hung` on the server's progress).
- requests: an operator's restart (drained first by the server's life cycle).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from supervisor.config import ServersSection
from supervisor.servers.exit_classifier import Trigger, describe_unasked_exit
from supervisor.servers.hang_rule import HangRule, ProgressReading
from supervisor.servers.process_group import ServerProcess
from supervisor.sglang.health import probe


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


async def has_exited(proc: ServerProcess) -> bool:
    """Our own child: a non-blocking waitpid. A server that is not our child (adopted, a
    systemd unit's) is looked up in /proc, which blocks: in a worker thread."""
    if proc.popen is not None:
        return proc.exited
    return await anyio.to_thread.run_sync(lambda: proc.exited)


async def watch_exit(proc: ServerProcess, decision: Decision, poll_s: float) -> None:
    while True:
        if await has_exited(proc):
            decision.decide(Failure(Trigger.EXITED, describe_unasked_exit(proc.returncode)))
            return
        await anyio.sleep(poll_s)


async def watch_health(name: str, client: httpx.AsyncClient, base_url: str,
                       settings: Callable[[], ServersSection], decision: Decision,
                       log: Any) -> None:
    """`settings` is read at each probe: a reload's health timings apply to the next one."""
    failures = 0
    while True:
        s = settings()
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


async def watch_progress(read: Callable[[], ProgressReading],
                         settings: Callable[[], ServersSection], decision: Decision,
                         rule: HangRule) -> None:
    """Hung-but-healthy: requests in flight and no token for `hang_timeout_s`
    (hang_rule.py says what counts), or the dispatcher saw its streamed requests stall
    while the server made no token for anyone (dispatch/stall_watch.py sets `hung`).
    `settings` is read at each tick: a reloaded hang timeout applies at once."""
    while True:
        s = settings()
        await anyio.sleep(max(0.05, min(s.health_interval_s, s.hang_timeout_s / 4)))
        r = read()
        if r.hung:
            decision.decide(Failure(Trigger.PROGRESS, r.hung))
            return
        reason = rule.observe(r, anyio.current_time(), s.hang_timeout_s)
        if reason is not None:
            decision.decide(Failure(Trigger.PROGRESS, reason))
            return


async def watch_requests(wait_request: Callable[[], Awaitable[Request | None]],
                         decision: Decision) -> None:
    while True:
        req = await wait_request()
        if req is not None and req.kind == "restart":
            decision.decide(req)
            return
        # A reset of a server that is not FAILED means nothing.
