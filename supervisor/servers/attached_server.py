"""A server the daemon did not launch (`servers.attach`: SGLang run as a Slurm job or a pod of
its own), supervised through the same READY life as the daemon's own servers: health probes,
the token-progress hang rule, per-request stall and wait aborts by rid, slots from
/server_info, the saturation guard, events and status. What differs is only what the daemon
may do to it: nothing. It is never launched, restarted or stopped.

    STOPPED ─▶ STARTING ─▶ READY ◀──▶ GONE          (STOPPED again when the daemon stops)

- STARTING: the first probe of `/health_generate`.
- GONE: it went away: its port refused a connection (checked every REACH_POLL_S, well
  inside the dispatcher's grace for a lost connection, so its requests go back to pending
  with no attempt counted), its health failed `health_failures` times in a row, or it was
  hung by the token rule. One line says so; its requests in flight are requeued when the
  READY life's serve() is cancelled, as for any server; then it is probed every
  `health_interval_s` until it answers 200, and READY again is one more line. After a hang
  it is first left alone for a backoff (the restart policy's delays), since it will answer
  its health probe while still making no progress.
- STOPPED: the daemon's end; the server itself runs on.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, replace

import anyio

from supervisor.config import ServersSection
from supervisor.config.attach_urls import AttachTarget
from supervisor.config.live_settings import LiveSettings
from supervisor.servers.exit_classifier import Trigger
from supervisor.servers.launch_command import ServerSpec
from supervisor.servers.managed_server import FleetContext, ManagedServer
from supervisor.servers.process_group import ServerProcess
from supervisor.servers.restart_policy import RestartPolicy
from supervisor.servers.server_log import ServerLog
from supervisor.servers.server_state import ATTACHED_TRANSITIONS, ServerSnapshot, ServerState
from supervisor.servers.watchers import Decision, Failure
from supervisor.sglang.health import NOT_LISTENING, probe

log = logging.getLogger("supervisor.servers")

S = ServerState

# How often a READY attached server's port is tried: a refused connection is "gone" at once
# (the dispatcher waits GONE_GRACE_S, 3 s, before it counts a lost connection as an attempt).
REACH_POLL_S = 0.5
REACH_TIMEOUT_S = 2.0


def _hhmm(t: float) -> str:
    """The daemon's local time of day, as an operator reads a log: "12:03:41"."""
    return time.strftime("%H:%M:%S", time.localtime(t))


class NotOurs(ValueError):
    """An operator's restart, retune or reset of an attached server: refused."""


def refusal(name: str, url: str, action: str) -> str:
    return (f"{name} is attached ({url}): the daemon did not launch it and never "
            f"{action}s it; {action} it where it runs (its Slurm job or pod)")


@dataclass(frozen=True)
class AttachedSpec(ServerSpec):
    url: str = ""

    @property
    def base_url(self) -> str:
        return self.url


def refused_or_unreachable(host: str, port: int, timeout_s: float) -> str | None:
    """Why the port cannot be reached (refused, no route, no such host), or None when it
    accepts a connection or only timed out (a busy or distant server: the health rule
    judges that). Blocking: call from a worker thread."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return None
    except socket.gaierror as exc:
        return f"{host} does not resolve ({exc.strerror or exc})"
    except OSError as exc:
        return f"connection to {host}:{port} failed: {exc.strerror or exc}"


class AttachedServer(ManagedServer):
    TRANSITIONS = ATTACHED_TRANSITIONS
    restartable = False

    def __init__(self, target: AttachTarget, live: LiveSettings, ctx: FleetContext,
                 server_log: ServerLog, policy: RestartPolicy) -> None:
        self.target = target
        super().__init__(target.name, (), target.port, live, ctx, server_log, policy)
        self._hangs_in_row = 0

    @property
    def servers(self) -> ServersSection:
        # The job's timings (health, hang rule), none of its SGLang flags: those describe the
        # daemon's own servers; this one's slots come from its own /server_info.
        return replace(self.live.server(self.name), flags={})

    @property
    def spec(self) -> AttachedSpec:
        return AttachedSpec(self.name, (), self.target.port, self.target.host, (),
                            url=self.target.url)

    def snapshot(self) -> ServerSnapshot:
        return replace(super().snapshot(), attached_url=self.target.url, pid=None, argv=())

    async def run(self) -> None:
        spec = self.spec
        # A stand-in for the process the life cycle watches: there is none of ours.
        proc = ServerProcess(0, 0, (), time.time())
        try:
            await self._transition(S.STARTING, f"attached to {spec.url}, probing it",
                                   url=spec.url)
            while True:
                await self._until_healthy(spec)
                # Each READY life counts as a start (restart_and_wait's bookkeeping); never
                # as a restart: the daemon restarts nothing here.
                self._starts += 1
                outcome = await self._serve(proc, spec, f"{spec.url} answers "
                                            "/health_generate 200")
                await self._gone(outcome)
        finally:
            with anyio.CancelScope(shield=True):
                await self._transition(S.STOPPED, f"supervisor shutting down; {spec.url} runs "
                                       "on (the daemon never stops an attached server)")

    async def _until_healthy(self, spec: AttachedSpec) -> None:
        """Probe until /health_generate answers 200. From STARTING, the first failure is
        GONE (one line); while GONE, probes fail quietly."""
        while True:
            s = self.servers
            ok, what = await probe(self.ctx.client, spec.base_url, s.health_timeout_s)
            if ok:
                return
            if self.state is S.STARTING:
                await self._transition(S.GONE, f"unreachable since {_hhmm(self.ctx.clock())}: "
                                       f"{what}", url=spec.url)
            await anyio.sleep(s.health_interval_s)

    async def _gone(self, outcome: object) -> None:
        if isinstance(outcome, Failure):
            kind = {Trigger.PROGRESS: "hung", Trigger.HEALTH: "unhealthy"}.get(
                outcome.trigger, "unreachable")
            detail = outcome.detail
            if kind == "unhealthy" and NOT_LISTENING in detail:
                # The health probes saw the refusal before the port check did (a short
                # health_interval_s): the same event, said the same way.
                kind = "unreachable"
        else:
            kind, detail = "unreachable", str(outcome)
        await self._transition(S.GONE, f"{kind} since {_hhmm(self.ctx.clock())}: {detail}; "
                               "its requests in flight went back to pending, probing until "
                               "it answers", url=self.target.url, why=kind)
        if kind == "hung":
            # It answers its health probe while making no progress: wait before trusting
            # that again, longer each time it hangs in a row.
            self._hangs_in_row += 1
            s = self.servers
            delay = min(s.backoff_max_s, s.backoff_initial_s * 2 ** (self._hangs_in_row - 1))
            await anyio.sleep(delay)
        else:
            self._hangs_in_row = 0

    async def _watch_alive(self, proc: ServerProcess, decision: Decision) -> None:
        host, port = self.target.host, self.target.port
        while True:
            await anyio.sleep(REACH_POLL_S)
            why = await anyio.to_thread.run_sync(refused_or_unreachable, host, port,
                                                 REACH_TIMEOUT_S, limiter=self.ctx.proc_limiter)
            if why is not None:
                decision.decide(Failure(Trigger.EXITED, why))
                return

    def request(self, kind: str, actor: str, reason: str) -> None:
        raise NotOurs(refusal(self.name, self.target.url, "restart"))


__all__ = ["AttachedServer", "AttachedSpec", "NotOurs", "refusal"]
