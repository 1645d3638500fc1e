"""A launched server's way to READY, and the port check before its launch.

`await_ready` probes `/health_generate` (sglang/health.py) until it answers 200 from our
own process group, the process exits, an operator asks for a restart, or the startup
timeout passes. A 200 from another program on the port (one that took it after our check)
is said and given up on, not taken for our server. `port_taken` names another program that
holds the port before a launch.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from supervisor.config import ServersSection
from supervisor.servers.exit_classifier import Trigger, describe_unasked_exit
from supervisor.servers.fleet_context import FleetContext
from supervisor.servers.launch_command import ServerSpec
from supervisor.servers.port_owner import PortHolder, foreign_listener, port_holder, served_by_group
from supervisor.servers.process_group import ServerProcess
from supervisor.servers.watchers import Failure, Request, has_exited
from supervisor.sglang.health import NO_ANSWER, probe

# Before a launch the port is checked this many times, PORT_RECHECK_S apart.
PORT_CHECKS = 3
PORT_RECHECK_S = 1.0
NOTHING_YET = "no probe answered yet"


class Ready:
    """Our own process answered the health probe with 200."""


async def await_ready(ctx: FleetContext, s: ServersSection, proc: ServerProcess,
                      spec: ServerSpec, take_request: Callable[[], Request | None],
                      sleep: Callable[[float], Awaitable[None]]) -> Ready | Request | Failure:
    """`take_request`: an operator's pending request, taken; `sleep`: waits between probes,
    woken early by a request (left pending for `take_request`)."""
    deadline = anyio.current_time() + s.startup_timeout_s
    interval = min(ctx.startup_probe_s, s.health_interval_s)
    # Refused connections and 503s alike mean "still loading" here (health.py).
    last = NOTHING_YET
    while True:
        exited = await exit_of(proc)
        if exited is not None:
            return Failure(Trigger.EXITED, f"{exited} while starting")
        req = take_request()
        if req is not None and req.kind == "restart":
            return req
        remaining = deadline - anyio.current_time()
        if remaining <= 0:
            return Failure(Trigger.STARTUP_TIMEOUT,
                           f"/health_generate not 200 after {s.startup_timeout_s:g} s "
                           f"(last probe: {last})")
        clipped = remaining < s.health_timeout_s
        ok, answer = await probe(ctx.client, spec.base_url, min(s.health_timeout_s, remaining))
        # A probe cut short by the startup deadline that timed out says nothing about the
        # server: the answer before it (refused, 503) is what the reason reports.
        if not (clipped and answer.startswith(NO_ANSWER) and last != NOTHING_YET):
            last = answer
        if ok and not await has_exited(proc):
            # 200 is not enough: it must be our process that answered.
            if await anyio.to_thread.run_sync(served_by_group, spec.port, proc.pgid,
                                              limiter=ctx.proc_limiter):
                return Ready()
            other = await anyio.to_thread.run_sync(foreign_listener, spec.port, proc.pgid,
                                                   limiter=ctx.proc_limiter)
            if other is not None:
                return Failure(Trigger.SPAWN_FAILED, f"{other.describe()}, which answered "
                               "the health probe instead of our server", give_up=True)
        await sleep(min(interval, max(remaining, 0.0)))


async def port_taken(ctx: FleetContext, spec: ServerSpec) -> PortHolder | None:
    """The port's holder when another program has it. Checked a few times a second apart:
    a server of ours that was just stopped may take a moment to let go."""
    holder = None
    for attempt in range(PORT_CHECKS):
        holder = await anyio.to_thread.run_sync(port_holder, spec.host, spec.port,
                                                limiter=ctx.proc_limiter)
        if holder is None:
            return None
        if attempt + 1 < PORT_CHECKS:
            await anyio.sleep(PORT_RECHECK_S)
    return holder


async def exit_of(proc: ServerProcess) -> str | None:
    """How our process ended (its return code or signal, said as not our doing), or None
    while it runs."""
    if await has_exited(proc):
        return describe_unasked_exit(proc.returncode)
    return None
