"""A server the daemon launched (or adopted: left running by an earlier daemon, or started
by an operator's systemctl restart of its unit), and its life cycle: launch, wait for
health, serve, stop, back off, restart.

    STOPPED ─▶ STARTING ─▶ READY ─▶ DRAINING ─▶ STOPPING ─▶ STOPPED ─▶ STARTING   (requested)
                  │          │                     ▲
                  └──────────┴── exit/hang/stall ──┘─▶ BACKOFF ─▶ STARTING         (failure)
                                                   └─▶ FAILED (too many) ─▶ operator reset

The READY life (the dispatcher's serve, the watchers, the drain) is ready_life.py, which an
attached server (attached_server.py) composes too; what this kind adds to it is its process's
exit and the operator's requests (restart, reset). Its transitions are checked against
ALLOWED_TRANSITIONS (server_state.py) by transitions.py.

Each life runs in the task that owns this server; everything it starts (the dispatcher's
serve, the watchers) lives in a task group inside it, so cancelling the fleet cancels them
all and the `finally` stops the process group.
"""


from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio

from state.records import InFlightClaim
from state.store import Store
from supervisor.config import ServersSection
from supervisor.config.live_settings import LiveSettings
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.figure_text import duration
from supervisor.servers.adoption import TOKEN_ENV
from supervisor.servers.exit_classifier import (
    ExitKind,
    ExitReason,
    Trigger,
    classify,
)
from supervisor.servers.fleet_context import FleetContext
from supervisor.servers.launch_command import ServerSpec, build_argv, build_env
from supervisor.servers.launcher import LaunchRequest
from supervisor.servers.left_in_flight import abort_left
from supervisor.servers.process_group import ServerProcess
from supervisor.servers.ready_life import LifeEnds, ReadyLife
from supervisor.servers.restart_policy import LifeEnd, RestartPolicy
from supervisor.servers.server_log import ServerLog
from supervisor.servers.server_state import ALLOWED_TRANSITIONS, ServerSnapshot, ServerState
from supervisor.servers.startup_probe import Ready, await_ready, exit_of, port_taken
from supervisor.servers.transitions import Transitions
from supervisor.servers.unit_takeover import WHY as TAKEOVER_WHY
from supervisor.servers.unit_takeover import take_over
from supervisor.servers.watchers import Failure, Request, watch_exit

log = logging.getLogger("supervisor.servers")

S = ServerState

@dataclass(frozen=True)
class _Adoption:
    """A server an earlier daemon left running, proven ours (adoption.py), to serve on."""
    proc: ServerProcess
    left_in_flight: list[InFlightClaim]
    roll: bool                  # its flags differ from the config's: a roll replaces it
    why: str = "left running by an earlier daemon"


class ManagedServer:
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
        self.transitions = Transitions(name, ALLOWED_TRANSITIONS, ctx)
        self.ready = ReadyLife(name, live, lambda: self.servers, ctx, self.transitions)
        self.restarts = 0
        self.last_exit: ExitReason | None = None
        self._proc: ServerProcess | None = None
        self._argv: tuple[str, ...] | None = None
        self._starts = 0
        self._start_reason, self._start_actor = "supervisor started", "supervisor"
        self._adoption: _Adoption | None = None
        # Adopted with flags that differ from the config's, and not restarted since.
        self.adopted_roll_pending = False
        self._request: Request | None = None
        self._poke = anyio.Event()
        # Set by the tuner while this server runs a trial's candidate flags (tune/tuner.py):
        # a candidate that crashes or OOMs says nothing about the server, so its failure
        # counts toward nothing that would mark the server FAILED; the tuner retunes it back.
        self.trial: str | None = None

    # -- what others see ----------------------------------------------------------------------

    @property
    def state(self) -> ServerState:
        return self.transitions.state

    @property
    def servers(self) -> ServersSection:
        """This server's own [servers] section as it is now: a retune of it alone changes its
        flags, a reload its timings (config/live_settings.py)."""
        return self.live.server(self.name)

    @property
    def spec(self) -> ServerSpec:
        return ServerSpec(self.name, self.gpus, self.port, self.servers.host,
                          tuple(build_argv(self.servers, self.port)))

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def refusal(self, action: str) -> str | None:
        """The daemon launched it: it may restart, retune and reset it (server_kind.py)."""
        return None

    def snapshot(self) -> ServerSnapshot:
        return ServerSnapshot(
            name=self.name, gpus=self.gpus, port=self.port, pid=self.pid,
            restarts=self.restarts,
            last_exit_reason=None if self.last_exit is None else str(self.last_exit),
            argv=self._argv if self._proc is not None and self._argv else self.spec.argv,
            failures_in_window=self.policy.failures_in_window(self.ctx.monotonic()),
            unserved_in_row=self.policy.unserved_in_row,
            **self.transitions.fields(), **self.ready.fields(),
        )

    async def wait_changed(self) -> None:
        await self.transitions.wait_changed()

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
                        return False, f"{self.state}: {self.transitions.reason}"
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
        self.ready.life_progress = None
        spec = self.spec
        adoption, self._adoption = self._adoption, None
        if adoption is None:
            adoption = await self._unit_started_outside(spec)
        if adoption is not None:
            await self._adopted_life(adoption, spec)
            return
        self.adopted_roll_pending = False
        await self.transitions.to(S.STARTING, self._start_reason, self._start_actor,
                                  argv=list(spec.argv), gpus=list(spec.gpus))
        env = build_env(spec, self.ctx.base_env)
        env[TOKEN_ENV] = self.ctx.job_token
        holder = await port_taken(self.ctx, spec)
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
        outcome = await await_ready(self.ctx, self.servers, proc, spec, self._take_request,
                                    self._sleep_unless_poked)
        if isinstance(outcome, Ready):
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
        await self.transitions.to(S.STARTING, f"{said}, {adoption.why}",
                                  argv=list(proc.argv), gpus=list(spec.gpus), pid=proc.pid,
                                  adopted=True)
        aborted = await abort_left(self.name, self.ctx.client, spec.base_url,
                                   adoption.left_in_flight)
        await self.transitions.event(EventKind.SERVER_ADOPTED, {
            "pid": proc.pid, "up_s": round(up_s, 1), "argv": list(proc.argv),
            "roll": adoption.roll, "left_in_flight": len(adoption.left_in_flight),
            "aborted": aborted, "why": adoption.why})
        outcome = await await_ready(self.ctx, self.servers, proc, spec, self._take_request,
                                    self._sleep_unless_poked)
        if isinstance(outcome, Ready):
            outcome = await self._serve(proc, spec, f"{said}: /health_generate answered 200")
        await self._end(proc, outcome)

    async def _sleep_unless_poked(self, timeout_s: float) -> None:
        # Wake early for an operator request but leave it pending for the caller to take.
        with anyio.move_on_after(timeout_s):
            await self._poke.wait()

    async def _serve(self, proc: ServerProcess, spec: ServerSpec,
                     ready_reason: str = "/health_generate answered 200") -> Request | Failure:
        # Our process's exit ends the life; an operator's restart drains it first.
        ends = LifeEnds(alive=partial(watch_exit, proc, poll_s=self.ctx.exit_poll_s),
                        requests=self._wait_request, exited=partial(exit_of, proc))
        return await self.ready.serve(spec.base_url, proc.argv, ready_reason, ends,
                                      pid=proc.pid or None)

    async def _end(self, proc: ServerProcess, outcome: Request | Failure) -> None:
        if isinstance(outcome, Request):
            trigger, detail, actor = Trigger.REQUESTED, f"{outcome.reason} by {outcome.actor}", outcome.actor
        else:
            trigger, detail, actor = outcome.trigger, outcome.detail, "supervisor"
        await self.transitions.to(S.STOPPING, detail, actor, pid=proc.pid)
        stopped = await self._stop_process(proc)
        if stopped == "replaced":
            # Its unit already runs a new life: an operator's systemctl restart, not a
            # failure; the next start takes that life over (unit_takeover.py).
            trigger, detail, actor = Trigger.REQUESTED, f"its unit was {TAKEOVER_WHY}", "systemd"
        reason = classify(trigger, proc.returncode, self.log.lines_since(proc.log_mark), detail)
        self.last_exit = reason
        if not reason.is_failure:
            await self.transitions.to(S.STOPPED, str(reason), actor,
                                      **self._exit_detail(reason, stopped))
            self._start_reason, self._start_actor = detail, actor
            return
        # Flags SGLang's parser refused fail the same way at every start: no backoff loop.
        give_up = ((isinstance(outcome, Failure) and outcome.give_up)
                   or reason.kind is ExitKind.CONFIG)
        await self._after_failure(reason, stopped, give_up=give_up)

    async def _after_failure(self, reason: ExitReason, stopped: str = "",
                             give_up: bool = False) -> None:
        detail = self._exit_detail(reason, stopped)
        if self.trial is not None:
            await self._trial_failed(reason, detail)
            return
        if give_up:
            await self.transitions.to(S.FAILED, f"{reason}; restarting cannot help, waiting "
                                      "for an operator", **detail)
            return
        life = self.ready.life_progress
        end = None if life is None else LifeEnd(life.answered,
                                                life.served(self.servers.served_after_s))
        decision = self.policy.record_failure(self.ctx.monotonic(), end)
        detail["failures_in_window"] = decision.failures_in_window
        detail["answered_in_window"] = decision.answered_in_window
        detail["unserved_in_row"] = decision.unserved_in_row
        detail["brief_in_row"] = decision.brief_in_row
        detail["served_s"] = round(life.span_s, 1) if life is not None else 0.0
        detail["answered"] = life.answered if life is not None else 0
        if decision.give_up:
            await self.transitions.to(
                S.FAILED, f"{reason}; {decision.reason}, waiting for an operator", **detail)
            return
        await self.transitions.to(S.BACKOFF, f"{reason}; restarting in {decision.delay_s:.1f} s",
                                  backoff_s=round(decision.delay_s, 3), **detail)
        await self._wait_backoff(reason, decision.delay_s)

    async def _trial_failed(self, reason: ExitReason, detail: dict[str, Any]) -> None:
        """A trial's candidate failed: BACKOFF, not counted, until the tuner's retune back
        (or the first backoff's wait, for a tuner that is gone)."""
        delay = self.servers.backoff_initial_s
        detail["trial"] = self.trial
        await self.transitions.to(S.BACKOFF, f"{reason}; {self.trial}: not counted toward "
                                  f"FAILED, restarting in {delay:.1f} s",
                                  backoff_s=round(delay, 3), **detail)
        await self._wait_backoff(reason, delay)

    async def _wait_backoff(self, reason: ExitReason, delay_s: float) -> None:
        """The backoff's wait, cut short by an operator's (or the tuner's) request."""
        req = await self._wait_request(delay_s)
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
            await self.transitions.to(S.STOPPING, "supervisor shutting down", pid=proc.pid)
            stopped = await self._stop_process(proc)
            self.last_exit = classify(Trigger.REQUESTED, proc.returncode, (),
                                      "supervisor shutting down")
            await self.transitions.to(S.STOPPED, str(self.last_exit),
                                      **self._exit_detail(self.last_exit, stopped))
        elif self.state is not S.STOPPED:
            await self.transitions.to(S.STOPPED, "supervisor shutting down")

