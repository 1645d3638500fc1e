"""The READY life of one server, whatever its kind: its slots are asked of SGLang, its endpoint
is handed to the dispatcher, and watchers run beside it until one decides why the life ends
(watchers.py: health probes, the progress watchdog; here also SGLang's /metrics with the
saturation guard, which moves the server's live in-flight limit). An operator's restart
drains first: the dispatcher stops sending and the requests in flight run to their end, up to
`drain_timeout_s`; whatever is still in flight then goes back to pending when the
dispatcher's serve() is cancelled.

A server's kind composes one ReadyLife and says, through LifeEnds, what only it knows: how
its server is seen to be gone (a process of ours exited; someone else's port refused), and
whether it takes an operator's requests (managed_server.py does, attached_server.py never).
The life's transitions (READY, DRAINING) are checked against the kind's own table.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from supervisor.config import DispatchSection, ServersSection
from supervisor.config.live_settings import LiveSettings
from supervisor.servers.dispatcher_view import ServerProgressView
from supervisor.servers.endpoint import Endpoint
from supervisor.servers.exit_classifier import Trigger
from supervisor.servers.fleet_context import FleetContext
from supervisor.servers.hang_rule import HangRule, LifeProgress
from supervisor.servers.inflight_limit import InFlightLimit
from supervisor.servers.launch_command import max_running
from supervisor.servers.progress_reading import ProgressReader
from supervisor.servers.saturation_watch import SaturationWatch
from supervisor.servers.server_slots import server_slots
from supervisor.servers.server_state import ServerState
from supervisor.servers.sglang_monitor import SglangMonitor
from supervisor.servers.transitions import Transitions
from supervisor.servers.watchers import (
    Decision,
    Failure,
    Request,
    watch_health,
    watch_progress,
    watch_requests,
)

log = logging.getLogger("supervisor.servers")

S = ServerState


@dataclass(frozen=True)
class LifeEnds:
    """What a server's kind watches beside the READY life's own watchers."""
    # Decides a Failure once the server is gone (its process exited, its port refused).
    alive: Callable[[Decision], Coroutine[Any, Any, None]]
    # The next operator request; None: the kind takes none, so its life never drains.
    requests: Callable[[], Awaitable[Request | None]] | None = None
    # While draining: how the server ended, if it did (its process's exit), else None.
    exited: Callable[[], Awaitable[str | None]] | None = None


class ReadyLife:
    def __init__(self, name: str, live: LiveSettings, servers: Callable[[], ServersSection],
                 ctx: FleetContext, transitions: Transitions) -> None:
        self.name = name
        self._live = live
        # The server's own [servers] section as it is now, read at each check: a reload's
        # timings apply within one interval, not from the next life.
        self._servers = servers
        self._ctx = ctx
        self._transitions = transitions
        self.endpoint: Endpoint | None = None
        self._server_slots: int | None = None   # what SGLang last said it runs at once
        # SGLang's own /metrics while READY (with --enable-metrics) and the over-commit flag;
        # each poll goes to the saturation guard, which lowers and raises this server's live
        # in-flight limit from those figures.
        self.saturation = SaturationWatch(name, lambda: self.dispatch, self.inflight_limit,
                                          emit=transitions.event)
        self.sglang = SglangMonitor(name, clock=ctx.clock, emit=transitions.event,
                                    on_poll=self.saturation.on_poll, ahead=self.queue_ahead)
        # The last READY life's progress span (None before a life is READY; the kind clears
        # it when a new life starts): whether a failed life had served, for the restart
        # policy's failure-loop count.
        self.life_progress: LifeProgress | None = None
        # What the hang watchdog reads each tick: tokens, or the derived completion rule.
        self.progress_reader = ProgressReader(name, self.progress, self.sglang, servers,
                                              lambda: self.dispatch, lambda: live.max_tokens,
                                              ctx.clock)

    # -- what others see ----------------------------------------------------------------------

    @property
    def dispatch(self) -> DispatchSection:
        """The job's [dispatch] section as it is now (a reload replaces it)."""
        return self._live.config.dispatch

    @property
    def max_running(self) -> int:
        """The dispatcher's slots: the READY life's, else what config says, else what the
        server said last time (0: not known before the server first answers /server_info)."""
        if self.endpoint is not None:
            return self.endpoint.max_running
        configured = max_running(self._servers(), self.dispatch)
        return configured if configured is not None else (self._server_slots or 0)

    def progress(self) -> ServerProgressView:
        return self._ctx.dispatcher.progress(self.name)

    def in_flight(self) -> int:
        return int(self.progress().in_flight)

    def inflight_limit(self) -> InFlightLimit | None:
        """The dispatcher's live limit for this server's READY life (None: not serving)."""
        return self._ctx.dispatcher.inflight_limit(self.name)

    def queue_ahead(self) -> int:
        """The requests the dispatcher keeps in SGLang's queue now (0: not serving)."""
        limit = self.inflight_limit()
        return 0 if limit is None else limit.ahead

    def fields(self) -> dict[str, Any]:
        """The snapshot's serving fields (server_state.py ServerSnapshot)."""
        limit = self.inflight_limit()
        serving: dict[str, Any] = {} if limit is None else {
            "inflight_limit": limit.limit, "inflight_limit_reason": limit.reason}
        return {"in_flight": self.in_flight(), "max_running": self.max_running,
                "sglang": self.sglang.view, "waiting": int(self.progress().waiting), **serving}

    # -- the life -----------------------------------------------------------------------------

    async def serve(self, base_url: str, argv: Sequence[str], ready_reason: str,
                    ends: LifeEnds, pid: int | None) -> Request | Failure:
        """READY until a watcher decides; returns why the life ended (an operator's request,
        drained, or a failure), with the dispatcher's serve() ended."""
        # The live max tokens (a `ctl max-tokens` changes it): SGLang's own estimate of its
        # slots, without a max-running-requests flag, is bounded by its KV pool at that size.
        slots = await server_slots(self.name, self._ctx.client, base_url, self._servers(),
                                   self.dispatch, self._ctx.dispatcher.max_tokens)
        if slots.source in ("server", "kv pool"):
            self._server_slots = slots.limit
        # The operator's fixed in-flight count is the whole of it: no queue ahead on top.
        ahead = 0 if slots.source == "dispatch" else self.dispatch.queue_ahead
        endpoint = Endpoint(self.name, base_url, slots.limit, ahead,
                            queueing=lambda: self.sglang.queueing,
                            tokens_at=self.progress_reader.tokens_at)
        draining = anyio.Event()
        serve_done = anyio.Event()
        serve_scope = anyio.CancelScope()
        decision = Decision()
        rule = HangRule(anyio.current_time())
        self.life_progress = rule.life
        # The process's own argv: an adopted server may run other flags than the config's.
        self.progress_reader.new_life(argv)

        async def serve() -> None:
            try:
                with serve_scope:
                    await self._ctx.dispatcher.serve(endpoint, draining)
            finally:
                serve_done.set()

        # The endpoint is published before READY is: whoever wakes on the transition (a
        # rolling restart waiting for this server) finds the limit the server now serves at.
        self.endpoint = endpoint
        try:
            await self._transitions.to(S.READY, ready_reason, pid=pid,
                                       max_running=endpoint.max_running, slots_from=slots.source,
                                       queue_ahead=ahead,
                                       **({"slots_why": slots.why} if slots.why else {}))
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve)
                with decision.scope:
                    async with anyio.create_task_group() as watch:
                        watch.start_soon(ends.alive, decision)
                        watch.start_soon(watch_health, self.name, self._ctx.client, base_url,
                                         self._servers, decision, log)
                        watch.start_soon(watch_progress, self.progress_reader.read,
                                         self._servers, decision, rule)
                        if ends.requests is not None:
                            watch.start_soon(watch_requests, ends.requests, decision)
                        watch.start_soon(self.sglang.watch, self._ctx.client, base_url, argv,
                                         self._servers().health_interval_s, self.in_flight)
                assert decision.outcome is not None
                outcome: Request | Failure = decision.outcome
                if isinstance(outcome, Request):
                    await self._transitions.to(S.DRAINING,
                                               f"{outcome.reason} by {outcome.actor}",
                                               outcome.actor)
                    draining.set()
                    exited = await self._drain(serve_done, ends)
                    if exited is not None:
                        outcome = exited
                # Whatever is still in flight goes back to pending: the dispatcher requeues
                # when its serve() is cancelled.
                serve_scope.cancel()
        finally:
            # The watchers read the answers only at their ticks: one recorded after the last
            # tick (a hang decided by the dispatcher, an exit) still makes this life one that
            # answered (restart_policy.py).
            rule.life.answered = max(rule.life.answered, self.progress_reader.answered())
            self.endpoint = None
            with anyio.CancelScope(shield=True):
                await self.sglang.end_life()
        return outcome

    async def _drain(self, serve_done: anyio.Event, ends: LifeEnds) -> Failure | None:
        timeout = self._servers().drain_timeout_s
        with anyio.move_on_after(timeout):
            while not serve_done.is_set():
                why = await ends.exited() if ends.exited is not None else None
                if why is not None:
                    return Failure(Trigger.EXITED, f"{why} while draining")
                with anyio.move_on_after(self._ctx.exit_poll_s):
                    await serve_done.wait()
            return None
        log.warning("%s: drain did not finish within %g s; requeueing what is left",
                    self.name, timeout)
        return None
