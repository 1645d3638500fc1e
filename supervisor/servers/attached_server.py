"""A server the daemon did not launch (`servers.attach`: SGLang run as a Slurm job or a pod of
its own), supervised through the same READY life (ready_life.py) as the daemon's own
servers: health probes, the token-progress hang rule, per-request stall and wait aborts by
rid, slots from /server_info, the saturation guard, events and status. What differs is its
life cycle (ATTACHED_TRANSITIONS, below) and what the daemon may do to it: nothing. It is
never launched, restarted, retuned, reset or stopped (`refusal` says so to the fleet and
the control socket).

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
from dataclasses import replace

import anyio

from supervisor.config import ServersSection
from supervisor.config.attach_urls import AttachTarget
from supervisor.config.live_settings import LiveSettings
from supervisor.servers.exit_classifier import Trigger
from supervisor.servers.fleet_context import FleetContext
from supervisor.servers.ready_life import LifeEnds, ReadyLife
from supervisor.servers.server_log import ServerLog
from supervisor.servers.server_state import ATTACHED_TRANSITIONS, ServerSnapshot, ServerState
from supervisor.servers.transitions import Transitions
from supervisor.servers.watchers import Decision, Failure, Request
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


class AttachedServer:
    def __init__(self, target: AttachTarget, live: LiveSettings, ctx: FleetContext,
                 server_log: ServerLog) -> None:
        self.target = target
        self.name = target.name
        self.live = live
        live.add_server(self.name)
        self.ctx = ctx
        self.log = server_log
        self.transitions = Transitions(self.name, ATTACHED_TRANSITIONS, ctx)
        self.ready = ReadyLife(self.name, live, lambda: self.servers, ctx, self.transitions)
        self._hangs_in_row = 0

    @property
    def state(self) -> ServerState:
        return self.transitions.state

    @property
    def servers(self) -> ServersSection:
        # The job's timings (health, hang rule), none of its SGLang flags: those describe the
        # daemon's own servers; this one's slots come from its own /server_info.
        return replace(self.live.server(self.name), flags={})

    def refusal(self, action: str) -> str | None:
        """Never restarted, retuned or reset here (server_kind.py): the line that says so."""
        return refusal(self.name, self.target.url, action)

    def snapshot(self) -> ServerSnapshot:
        # No pid, argv, restart or exit of ours: the daemon never launched it.
        return ServerSnapshot(name=self.name, gpus=(), port=self.target.port, pid=None,
                              restarts=0, last_exit_reason=None, argv=(),
                              attached_url=self.target.url,
                              **self.transitions.fields(), **self.ready.fields())

    async def wait_changed(self) -> None:
        await self.transitions.wait_changed()

    async def run(self) -> None:
        url = self.target.url
        # Its port refusing is its end; it takes no operator's request, so it never drains.
        ends = LifeEnds(alive=self._watch_reachable)
        try:
            await self.transitions.to(S.STARTING, f"attached to {url}, probing it", url=url)
            while True:
                await self._until_healthy()
                # No process of ours: no pid, no argv (its flags are its own job's).
                outcome = await self.ready.serve(url, (), f"{url} answers /health_generate "
                                                 "200", ends, pid=None)
                await self._gone(outcome)
        finally:
            with anyio.CancelScope(shield=True):
                await self.transitions.to(S.STOPPED, f"supervisor shutting down; {url} runs "
                                          "on (the daemon never stops an attached server)")

    async def _until_healthy(self) -> None:
        """Probe until /health_generate answers 200. From STARTING, the first failure is
        GONE (one line); while GONE, probes fail quietly."""
        url = self.target.url
        while True:
            s = self.servers
            ok, what = await probe(self.ctx.client, url, s.health_timeout_s)
            if ok:
                return
            if self.state is S.STARTING:
                await self.transitions.to(S.GONE, f"unreachable since "
                                          f"{_hhmm(self.ctx.clock())}: {what}", url=url)
            await anyio.sleep(s.health_interval_s)

    async def _gone(self, outcome: Request | Failure) -> None:
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
        await self.transitions.to(S.GONE, f"{kind} since {_hhmm(self.ctx.clock())}: {detail}; "
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

    async def _watch_reachable(self, decision: Decision) -> None:
        host, port = self.target.host, self.target.port
        while True:
            await anyio.sleep(REACH_POLL_S)
            why = await anyio.to_thread.run_sync(refused_or_unreachable, host, port,
                                                 REACH_TIMEOUT_S, limiter=self.ctx.proc_limiter)
            if why is not None:
                decision.decide(Failure(Trigger.EXITED, why))
                return


__all__ = ["AttachedServer", "NotOurs", "refusal"]
