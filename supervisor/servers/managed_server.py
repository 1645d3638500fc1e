"""One server's life cycle: launch, wait for health, serve, watch, stop, back off, restart.

    STOPPED ─▶ STARTING ─▶ READY ─▶ DRAINING ─▶ STOPPING ─▶ STOPPED ─▶ STARTING   (requested)
                  │          │                     ▲
                  └──────────┴── exit/hang/stall ──┘─▶ BACKOFF ─▶ STARTING         (failure)
                                                   └─▶ FAILED (too many) ─▶ operator reset

The watchers that end a READY life (exit, health, progress, operator requests) are in
watchers.py; the allowed state transitions are the table in server_state.py, and every
transition here is checked against it.

Each life runs in the task that owns this server; everything it starts (the dispatcher's
serve, the watchers) lives in a task group inside it, so cancelling the fleet cancels them
all and the `finally` stops the process group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import httpx

from state.records import InFlightClaim
from state.store import Store
from supervisor.config import DispatchSection, ServersSection
from supervisor.config.live_settings import LiveSettings
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.figure_text import duration
from supervisor.servers.adoption import TOKEN_ENV
from supervisor.servers.endpoint import Endpoint
from supervisor.servers.exit_classifier import (
    ExitKind,
    ExitReason,
    Trigger,
    classify,
    describe_unasked_exit,
)
from supervisor.servers.hang_rule import HangRule, LifeProgress
from supervisor.servers.launch_command import ServerSpec, build_argv, build_env, max_running
from supervisor.servers.launcher import Launcher, LaunchRequest
from supervisor.servers.left_in_flight import abort_left
from supervisor.servers.port_owner import PortHolder, foreign_listener, port_holder, served_by_group
from supervisor.servers.process_group import ServerProcess
from supervisor.servers.progress_reading import ProgressReader, ServerProgressView
from supervisor.servers.restart_policy import RestartPolicy
from supervisor.servers.saturation_watch import SaturationWatch
from supervisor.servers.server_log import ServerLog
from supervisor.servers.server_slots import server_slots
from supervisor.servers.server_state import (
    ALLOWED_TRANSITIONS,
    ServerSnapshot,
    ServerState,
    check_transition,
)
from supervisor.servers.sglang_monitor import SglangMonitor
from supervisor.servers.unit_takeover import WHY as TAKEOVER_WHY
from supervisor.servers.unit_takeover import take_over
from supervisor.servers.watchers import (
    Decision,
    Failure,
    Request,
    has_exited,
    watch_exit,
    watch_health,
    watch_progress,
    watch_requests,
)
from supervisor.sglang.health import probe

log = logging.getLogger("supervisor.servers")

S = ServerState

# Before a launch the port is checked this many times, PORT_RECHECK_S apart.
PORT_CHECKS = 3
PORT_RECHECK_S = 1.0


class Dispatching(Protocol):
    """What the servers ask of the dispatcher: keep a READY server's slots full until it
    drains, and how its requests are going (its slots, the hang watch)."""

    async def serve(self, endpoint: Endpoint, draining: anyio.Event) -> None: ...

    def progress(self, name: str) -> ServerProgressView: ...


@dataclass
class FleetContext:
    """What every server of a fleet shares."""

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


@dataclass(frozen=True)
class _Adoption:
    """A server an earlier daemon left running, proven ours (adoption.py), to serve on."""
    proc: ServerProcess
    left_in_flight: list[InFlightClaim]
    roll: bool                  # its flags differ from the config's: a roll replaces it
    why: str = "left running by an earlier daemon"


class _Ready:
    pass


class ManagedServer:
    # The life cycle this server may go through (an attached server has its own).
    TRANSITIONS = ALLOWED_TRANSITIONS

    def __init__(self, name: str, gpus: tuple[int, ...], port: int, live: LiveSettings,
                 ctx: FleetContext, server_log: ServerLog, policy: RestartPolicy) -> None:
        self.name = name
        self.gpus = gpus
        self.port = port
        self.live = live
        live.add_server(name)
        # A reload's new limits reach the restart policy, which keeps the failures it has seen.
        live.subscribe(lambda _config: self.policy.follow(self.servers))
        self.ctx = ctx
        self.log = server_log
        self.policy = policy
        self.state = S.STOPPED
        self.state_since = ctx.clock()
        self.ready_since: float | None = None
        self.state_reason = "not started"
        self.restarts = 0
        self.last_exit: ExitReason | None = None
        self.endpoint: Endpoint | None = None
        self._server_slots: int | None = None   # what SGLang last said it runs at once
        self._proc: ServerProcess | None = None
        self._argv: tuple[str, ...] | None = None
        self._starts = 0
        self._start_reason, self._start_actor = "supervisor started", "supervisor"
        self._adoption: _Adoption | None = None
        # Adopted with flags that differ from the config's, and not restarted since.
        self.adopted_roll_pending = False
        self._request: Request | None = None
        self._poke = anyio.Event()
        self._changed = anyio.Event()
        # SGLang's own /metrics while READY (with --enable-metrics), and the over-commit flag.
        # ... and the saturation guard, which lowers and raises this server's live in-flight
        # limit from those figures.
        self.saturation = SaturationWatch(name, lambda: self.dispatch, self._inflight_limit,
                                          emit=self._add_event)
        self.sglang = SglangMonitor(name, clock=ctx.clock, emit=self._add_event,
                                    on_poll=self.saturation.on_poll)
        # The READY life's progress span (None before it is READY): whether a failed life
        # had served, for the restart policy's failure-loop count.
        self._life_progress: LifeProgress | None = None
        # What the hang watchdog reads each tick: tokens, or the derived completion rule.
        self.progress_reader = ProgressReader(name, self._progress, self.sglang,
                                              lambda: self.servers, lambda: self.dispatch,
                                              lambda: self.live.max_tokens, ctx.clock)

    # -- what others see ----------------------------------------------------------------------

    @property
    def servers(self) -> ServersSection:
        """This server's own [servers] section as it is now: a retune of it alone changes its
        flags, a reload its timings (config/live_settings.py)."""
        return self.live.server(self.name)

    @property
    def dispatch(self) -> DispatchSection:
        return self.live.config.dispatch

    @property
    def spec(self) -> ServerSpec:
        return ServerSpec(self.name, self.gpus, self.port, self.servers.host,
                          tuple(build_argv(self.servers, self.port)))

    @property
    def max_running(self) -> int:
        """The dispatcher's slots: the READY life's, else what config says, else what the
        server said last time (0: not known before the server first answers /server_info)."""
        if self.endpoint is not None:
            return self.endpoint.max_running
        configured = max_running(self.servers, self.dispatch)
        return configured if configured is not None else (self._server_slots or 0)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def snapshot(self) -> ServerSnapshot:
        try:
            in_flight = int(self.ctx.dispatcher.progress(self.name).in_flight)
        except LookupError:
            in_flight = 0
        return ServerSnapshot(
            name=self.name, gpus=self.gpus, port=self.port, state=self.state, pid=self.pid,
            in_flight=in_flight, restarts=self.restarts,
            last_exit_reason=None if self.last_exit is None else str(self.last_exit),
            state_since=self.state_since, max_running=self.max_running,
            argv=self._argv if self._proc is not None and self._argv else self.spec.argv,
            state_reason=self.state_reason,
            failures_in_window=self.policy.failures_in_window(self.ctx.monotonic()),
            sglang=self.sglang.view, ready_since=self.ready_since,
            waiting=self._waiting(),
            unserved_in_row=self.policy.unserved_in_row,
            **self._limit_fields(),
        )

    def _progress(self) -> ServerProgressView:
        return self.ctx.dispatcher.progress(self.name)

    def _waiting(self) -> int:
        try:
            return int(getattr(self._progress(), "waiting", 0))
        except LookupError:
            return 0

    def _inflight_limit(self) -> Any:
        """The dispatcher's live limit for this server's READY life, if it keeps one."""
        get = getattr(self.ctx.dispatcher, "inflight_limit", None)
        return get(self.name) if get is not None else None

    def _limit_fields(self) -> dict[str, Any]:
        limit = self._inflight_limit()
        if limit is None:
            return {}
        return {"inflight_limit": limit.limit, "inflight_limit_reason": limit.reason}

    def _in_flight(self) -> int:
        try:
            return int(self._progress().in_flight)
        except LookupError:
            return 0

    async def _add_event(self, kind: str, detail: dict[str, Any]) -> None:
        await self.ctx.store_call(Store.add_event, kind, self.name, detail, "supervisor",
                                  self.ctx.clock())

    async def wait_changed(self) -> None:
        await self._changed.wait()

    # -- requests from the fleet (operator actions) ---------------------------------------------

    def request(self, kind: str, actor: str, reason: str) -> None:
        # A newer request replaces a pending one: two restarts in a row are one restart.
        self._request = Request(kind, actor, reason)
        self._poke.set()

    def _take_request(self) -> Request | None:
        req, self._request = self._request, None
        if self._poke.is_set():
            self._poke = anyio.Event()
        return req

    async def _wait_request(self, timeout_s: float = float("inf")) -> Request | None:
        with anyio.move_on_after(timeout_s):
            while True:
                req = self._take_request()
                if req is not None:
                    return req
                await self._poke.wait()
        return None

    async def restart_and_wait(self, actor: str, reason: str) -> tuple[bool, str]:
        """Ask for a restart; True once the new process is READY, False if it failed."""
        starts = self._starts
        self.request("restart", actor, reason)
        s = self.servers
        limit = (s.drain_timeout_s + 2 * (s.stop_grace_s + self.ctx.kill_wait_s)
                 + s.startup_timeout_s + 60.0)
        with anyio.move_on_after(limit):
            while True:
                if self._starts > starts:
                    if self.state is S.READY:
                        return True, "ready"
                    if self.state in (S.BACKOFF, S.FAILED):
                        return False, f"{self.state}: {self.state_reason}"
                await self.wait_changed()
        return False, f"not READY within {limit:.0f} s (state {self.state})"

    # -- the life cycle -------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            while True:
                if self.state is S.FAILED:
                    req = await self._wait_request()
                    assert req is not None
                    self.policy.reset()
                    self._start_reason, self._start_actor = f"{req.reason} by {req.actor}", req.actor
                await self._life()
        finally:
            with anyio.CancelScope(shield=True):
                await self._final_stop()

    def adopt(self, proc: ServerProcess, left_in_flight: list[InFlightClaim],
              roll: bool = False) -> None:
        """Take over a running server instead of launching one at the first start (the
        fleet calls this before run())."""
        self._adoption = _Adoption(proc, left_in_flight, roll)
        self.adopted_roll_pending = roll

    async def _life(self) -> None:
        self._starts += 1
        if self._starts > 1:
            self.restarts += 1
        self._life_progress = None
        spec = self.spec
        adoption, self._adoption = self._adoption, None
        if adoption is None:
            adoption = await self._unit_started_outside(spec)
        if adoption is not None:
            await self._adopted_life(adoption, spec)
            return
        self.adopted_roll_pending = False
        await self._transition(S.STARTING, self._start_reason, self._start_actor,
                               argv=list(spec.argv), gpus=list(spec.gpus))
        env = build_env(spec, self.ctx.base_env)
        env[TOKEN_ENV] = self.ctx.job_token
        holder = await self._port_taken(spec)
        if holder is not None:
            self.last_exit = classify(Trigger.SPAWN_FAILED, None, (), holder.describe())
            await self._after_failure(self.last_exit, give_up=True)
            return
        try:
            request = LaunchRequest(self.name, spec.argv, env, self.log,
                                    f"{self.name} start #{self._starts}", self.ctx.cwd)
            proc = await anyio.to_thread.run_sync(self.ctx.launcher.launch, request,
                                                  limiter=self.ctx.proc_limiter)
        except OSError as exc:
            reason = classify(Trigger.SPAWN_FAILED, None, (),
                              f"could not start {spec.argv[0]!r}: {exc}")
            self.last_exit = reason
            await self._after_failure(reason)
            return
        self._proc, self._argv = proc, spec.argv
        log.info("%s: launched pid %d (%s launcher)", self.name, proc.pid, self.ctx.launcher.kind)
        await self.ctx.store_call(Store.record_server_process, self.name, proc.pid, proc.pgid,
                                  list(proc.argv), proc.started_at)
        outcome = await self._await_ready(proc, spec)
        if isinstance(outcome, _Ready):
            outcome = await self._serve(proc, spec)
        await self._end(proc, outcome)

    async def _unit_started_outside(self, spec: ServerSpec) -> _Adoption | None:
        """Its unit's life an operator started with systemctl, proven ours (unit_takeover.py),
        recorded as this server's process so a later daemon can adopt it too."""
        verdict = await anyio.to_thread.run_sync(
            take_over, self.name, spec, self.ctx.launcher, self.ctx.job_token,
            self.ctx.base_env, self.servers.stop_grace_s, self.ctx.kill_wait_s,
            limiter=self.ctx.proc_limiter)
        if verdict is None or verdict.proc is None:
            return None
        proc = verdict.proc
        await self.ctx.store_call(Store.record_server_process, self.name, proc.pid, proc.pgid,
                                  list(proc.argv), proc.started_at)
        return _Adoption(proc, [], roll=False, why=TAKEOVER_WHY)

    async def _adopted_life(self, adoption: _Adoption, spec: ServerSpec) -> None:
        """A life that began under an earlier daemon (or an operator's systemctl restart of
        its unit): no launch, no model load. Its log is followed from where it is, the
        answers the dead daemon left in flight on it are aborted (they were requeued at
        start, no attempt counted: nobody reads them), and one health check makes it READY."""
        proc = adoption.proc
        up_s = max(0.0, self.ctx.clock() - proc.started_at)
        said = f"adopted pid {proc.pid}, up {duration(up_s)}"
        await anyio.to_thread.run_sync(self.log.skip_to_end, True,
                                       limiter=self.ctx.proc_limiter)
        proc.log_mark = self.log.line_count
        self.log.follow()
        self._proc, self._argv = proc, proc.argv
        await self._transition(S.STARTING, f"{said}, {adoption.why}",
                               argv=list(proc.argv), gpus=list(spec.gpus), pid=proc.pid,
                               adopted=True)
        aborted = await abort_left(self.name, self.ctx.client, spec.base_url,
                                   adoption.left_in_flight)
        await self._add_event(EventKind.SERVER_ADOPTED, {
            "pid": proc.pid, "up_s": round(up_s, 1), "argv": list(proc.argv),
            "roll": adoption.roll, "left_in_flight": len(adoption.left_in_flight),
            "aborted": aborted, "why": adoption.why})
        outcome = await self._await_ready(proc, spec)
        if isinstance(outcome, _Ready):
            outcome = await self._serve(proc, spec, f"{said}: /health_generate answered 200")
        await self._end(proc, outcome)

    async def _await_ready(self, proc: ServerProcess, spec: ServerSpec) -> _Ready | Request | Failure:
        s = self.servers
        deadline = anyio.current_time() + s.startup_timeout_s
        interval = min(self.ctx.startup_probe_s, s.health_interval_s)
        # Refused connections and 503s alike mean "still loading" here (health.py).
        last = "no probe answered yet"
        while True:
            if await has_exited(proc):
                return Failure(Trigger.EXITED,
                               f"{describe_unasked_exit(proc.returncode)} while starting")
            req = self._take_request()
            if req is not None and req.kind == "restart":
                return req
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                return Failure(Trigger.STARTUP_TIMEOUT,
                               f"/health_generate not 200 after {s.startup_timeout_s:g} s "
                               f"(last probe: {last})")
            ok, last = await probe(self.ctx.client, spec.base_url,
                                   min(s.health_timeout_s, remaining))
            if ok and not await has_exited(proc):
                # 200 is not enough: it must be our process that answered.
                if await anyio.to_thread.run_sync(served_by_group, spec.port, proc.pgid,
                                                  limiter=self.ctx.proc_limiter):
                    return _Ready()
                other = await anyio.to_thread.run_sync(foreign_listener, spec.port, proc.pgid,
                                                       limiter=self.ctx.proc_limiter)
                if other is not None:
                    return Failure(Trigger.SPAWN_FAILED, f"{other.describe()}, which answered "
                                   "the health probe instead of our server", give_up=True)
            await self._sleep_unless_poked(min(interval, max(remaining, 0.0)))

    async def _port_taken(self, spec: ServerSpec) -> PortHolder | None:
        """The port's holder when another program has it. Checked a few times a second
        apart: a server of ours that was just stopped may take a moment to let go."""
        holder = None
        for attempt in range(PORT_CHECKS):
            holder = await anyio.to_thread.run_sync(port_holder, spec.host, spec.port,
                                                    limiter=self.ctx.proc_limiter)
            if holder is None:
                return None
            if attempt + 1 < PORT_CHECKS:
                await anyio.sleep(PORT_RECHECK_S)
        return holder

    async def _sleep_unless_poked(self, timeout_s: float) -> None:
        # Wake early for an operator request but leave it pending for the caller to take.
        with anyio.move_on_after(timeout_s):
            await self._poke.wait()

    async def _serve(self, proc: ServerProcess, spec: ServerSpec,
                     ready_reason: str = "/health_generate answered 200") -> Request | Failure:
        # The live max tokens (a `ctl max-tokens` changes it): SGLang's own estimate of its
        # slots, without a max-running-requests flag, is bounded by its KV pool at that size.
        slots = await server_slots(self.name, self.ctx.client, spec.base_url, self.servers,
                                   self.dispatch, getattr(self.ctx.dispatcher, "max_tokens",
                                                          None))
        if slots.source in ("server", "kv pool"):
            self._server_slots = slots.limit
        endpoint = Endpoint(self.name, spec.base_url, slots.limit,
                            queueing=lambda: self.sglang.queueing,
                            tokens_at=self.progress_reader.tokens_at)
        draining = anyio.Event()
        serve_done = anyio.Event()
        serve_scope = anyio.CancelScope()
        decision = Decision()
        rule = HangRule(anyio.current_time())
        self._life_progress = rule.life
        # The process's own argv: an adopted server may run other flags than the config's.
        self.progress_reader.new_life(proc.argv)

        async def serve() -> None:
            try:
                with serve_scope:
                    await self.ctx.dispatcher.serve(endpoint, draining)
            finally:
                serve_done.set()

        # The endpoint is published before READY is: whoever wakes on the transition (a
        # rolling restart waiting for this server) finds the limit the server now serves at.
        self.endpoint = endpoint
        try:
            await self._transition(S.READY, ready_reason, pid=proc.pid or None,
                                   max_running=endpoint.max_running, slots_from=slots.source,
                                   **({"slots_why": slots.why} if slots.why else {}))
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve)
                with decision.scope:
                    async with anyio.create_task_group() as watch:
                        watch.start_soon(self._watch_alive, proc, decision)
                        # The watchers read this server's settings at each check, so a
                        # reload's timings apply within one interval, not from the next life.
                        watch.start_soon(watch_health, self.name, self.ctx.client,
                                         spec.base_url, lambda: self.servers, decision, log)
                        watch.start_soon(watch_progress, self.progress_reader.read,
                                         lambda: self.servers, decision, rule)
                        if self.restartable:
                            watch.start_soon(watch_requests, self._wait_request, decision)
                        watch.start_soon(self.sglang.watch, self.ctx.client, spec.base_url,
                                         proc.argv, self.servers.health_interval_s,
                                         self._in_flight)
                outcome = decision.outcome
                assert outcome is not None
                if isinstance(outcome, Request):
                    await self._transition(S.DRAINING, f"{outcome.reason} by {outcome.actor}",
                                           outcome.actor)
                    draining.set()
                    exited = await self._drain(proc, serve_done)
                    if exited is not None:
                        outcome = exited
                # Whatever is still in flight goes back to pending: the dispatcher requeues
                # when its serve() is cancelled.
                serve_scope.cancel()
        finally:
            self.endpoint = None
            with anyio.CancelScope(shield=True):
                await self.sglang.end_life()
        return outcome

    # An attached server (attached_server.py) is watched by its port, not a process, and
    # takes no operator's restart.
    restartable = True

    async def _watch_alive(self, proc: ServerProcess, decision: Decision) -> None:
        await watch_exit(proc, decision, self.ctx.exit_poll_s)

    async def _drain(self, proc: ServerProcess, serve_done: anyio.Event) -> Failure | None:
        timeout = self.servers.drain_timeout_s
        with anyio.move_on_after(timeout):
            while not serve_done.is_set():
                if await has_exited(proc):
                    return Failure(Trigger.EXITED,
                                   f"{describe_unasked_exit(proc.returncode)} while draining")
                with anyio.move_on_after(self.ctx.exit_poll_s):
                    await serve_done.wait()
            return None
        log.warning("%s: drain did not finish within %g s; requeueing what is left",
                    self.name, timeout)
        return None

    async def _end(self, proc: ServerProcess, outcome: Request | Failure) -> None:
        if isinstance(outcome, Request):
            trigger, detail, actor = Trigger.REQUESTED, f"{outcome.reason} by {outcome.actor}", outcome.actor
        else:
            trigger, detail, actor = outcome.trigger, outcome.detail, "supervisor"
        await self._transition(S.STOPPING, detail, actor, pid=proc.pid)
        stopped = await self._stop_process(proc)
        if stopped == "replaced":
            # Its unit already runs a new life: an operator's systemctl restart, not a
            # failure; the next start takes that life over (unit_takeover.py).
            trigger, detail, actor = Trigger.REQUESTED, f"its unit was {TAKEOVER_WHY}", "systemd"
        reason = classify(trigger, proc.returncode, self.log.lines_since(proc.log_mark), detail)
        self.last_exit = reason
        if not reason.is_failure:
            await self._transition(S.STOPPED, str(reason), actor, **self._exit_detail(reason, stopped))
            self._start_reason, self._start_actor = detail, actor
            return
        # Flags SGLang's parser refused fail the same way at every start: no backoff loop.
        give_up = ((isinstance(outcome, Failure) and outcome.give_up)
                   or reason.kind is ExitKind.CONFIG)
        await self._after_failure(reason, stopped, give_up=give_up)

    async def _after_failure(self, reason: ExitReason, stopped: str = "",
                             give_up: bool = False) -> None:
        detail = self._exit_detail(reason, stopped)
        if give_up:
            await self._transition(S.FAILED, f"{reason}; restarting cannot help, waiting for "
                                   "an operator", **detail)
            return
        life = self._life_progress
        served = life is not None and life.served(self.servers.served_after_s)
        decision = self.policy.record_failure(self.ctx.monotonic(), served=served)
        detail["failures_in_window"] = decision.failures_in_window
        detail["unserved_in_row"] = decision.unserved_in_row
        detail["served_s"] = round(life.span_s, 1) if life is not None else 0.0
        detail["answered"] = life.answered if life is not None else 0
        if decision.give_up:
            await self._transition(
                S.FAILED, f"{reason}; {decision.reason}, waiting for an operator", **detail)
            return
        await self._transition(S.BACKOFF, f"{reason}; restarting in {decision.delay_s:.1f} s",
                               backoff_s=round(decision.delay_s, 3), **detail)
        req = await self._wait_request(decision.delay_s)
        if req is None:
            self._start_reason, self._start_actor = f"restart after {reason.kind}", "supervisor"
        else:
            self._start_reason, self._start_actor = f"{req.reason} by {req.actor}", req.actor

    @staticmethod
    def _exit_detail(reason: ExitReason, stopped: str) -> dict[str, Any]:
        return {"exit_kind": reason.kind.value, "exit_code": reason.exit_code,
                "signal": reason.signal, "evidence": reason.evidence, "group": stopped or None}

    async def _stop_process(self, proc: ServerProcess) -> str:
        result = await anyio.to_thread.run_sync(
            self.ctx.launcher.stop, proc, self.servers.stop_grace_s, self.ctx.kill_wait_s,
            limiter=self.ctx.proc_limiter)
        # The group is gone: read its last lines, the ones that say why it died, before
        # the exit is classified.
        await anyio.to_thread.run_sync(self.log.catch_up, True, limiter=self.ctx.proc_limiter)
        if self._proc is proc:
            self._proc = None
        await self.ctx.store_call(Store.forget_server_process, self.name)
        return result

    async def _final_stop(self) -> None:
        proc = self._proc
        if proc is not None and self.ctx.keep_on_exit():
            # Left for the next daemon: its record stays, so that daemon can prove it ours.
            log.info("%s: left running (pid %d) for the next daemon to adopt", self.name,
                     proc.pid)
            return
        if proc is not None:
            await self._transition(S.STOPPING, "supervisor shutting down", pid=proc.pid)
            stopped = await self._stop_process(proc)
            self.last_exit = classify(Trigger.REQUESTED, proc.returncode, (),
                                      "supervisor shutting down")
            await self._transition(S.STOPPED, str(self.last_exit),
                                   **self._exit_detail(self.last_exit, stopped))
        elif self.state is not S.STOPPED:
            await self._transition(S.STOPPED, "supervisor shutting down")

    async def _transition(self, new: ServerState, reason: str, actor: str = "supervisor",
                          **detail: Any) -> None:
        old = self.state
        check_transition(old, new, self.TRANSITIONS)
        self.state, self.state_since, self.state_reason = new, self.ctx.clock(), reason
        if new is S.READY:
            self.ready_since = self.state_since
        elif new is not S.DRAINING:
            self.ready_since = None
        failing = new in (S.BACKOFF, S.FAILED, S.GONE) or (new is S.STOPPING and actor == "supervisor"
                                                   and reason != "supervisor shutting down")
        log.log(logging.WARNING if failing else logging.INFO, "%s: %s -> %s: %s",
                self.name, old, new, reason)
        self._changed.set()
        self._changed = anyio.Event()
        self.ctx.on_change()
        event = {"from": old.value, "to": new.value, "reason": reason, **detail}
        with anyio.CancelScope(shield=True):
            await self.ctx.store_call(Store.add_event, EventKind.SERVER_STATE, self.name, event,
                                      actor, self.state_since)
