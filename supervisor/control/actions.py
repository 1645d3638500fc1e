"""What an operator can do over the socket: one method per entry of contract/api.py's table,
named after it, taking its request record and the caller and answering its result record.
The control app records each action (a POST) in the events table as `control_action` with
the caller's uid, user name and pid, after the method returned.

A value the daemon refuses raises Refused with the HTTP status and one line saying why;
nothing is changed then. Restarts and retunes take minutes (a model load), so they are
accepted, run in the control server's task group, and followed through the event stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import anyio.abc

from state.async_store import AsyncStore
from state.store import Store
from supervisor.config import ConfigError
from supervisor.config.live_settings import LiveSettings
from supervisor.contract import status as c
from supervisor.contract.actions import (
    FlagChange,
    LogRequest,
    LogTail,
    MaxTokensRequest,
    MaxTokensResult,
    PauseRequest,
    PauseResult,
    RequeueFailedRequest,
    RequeueResult,
    RequeueTruncatedRequest,
    ResetRequest,
    ResetResult,
    RestartRequest,
    RestartResult,
    ResumeRequest,
    ResumeResult,
    RetuneRequest,
    RetuneResult,
)
from supervisor.contract.codec import to_plain
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.pause_sources import LIFTABLE, PauseSource
from supervisor.contract.status import flag_value
from supervisor.contract.tuning import (
    TuneStartRequest,
    TuneStartResult,
    TuneStopRequest,
    TuneStopResult,
)
from supervisor.control.peer import actor_of
from supervisor.dispatch.dispatcher import Dispatcher
from supervisor.servers.fleet import Fleet, RollBusy, RollingResult, RollTicket
from supervisor.sglang.continuation import inexact_sampling
from supervisor.tune.tuner import Tuner, TuneRefused

log = logging.getLogger("supervisor.control")

OPERATOR = PauseSource.OPERATOR
MAX_REASON = 500
MAX_LOG_LINES = 10_000


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class JobParts(Protocol):
    live: LiveSettings
    dispatcher: Dispatcher | None
    fleet: Fleet | None
    tuner: Tuner | None


class Actions:
    def __init__(self, job: JobParts, astore: AsyncStore, tg: anyio.abc.TaskGroup,
                 clock: Callable[[], float] = time.time) -> None:
        self.job = job
        self.astore = astore
        self.tg = tg
        self.clock = clock

    # -- helpers ------------------------------------------------------------------------------

    @property
    def dispatcher(self) -> Dispatcher:
        if self.job.dispatcher is None:
            raise Refused(503, "the job is not dispatching yet")
        return self.job.dispatcher

    @property
    def fleet(self) -> Fleet:
        if self.job.fleet is None:
            raise Refused(503, "the servers are not set up yet")
        return self.job.fleet

    def server_names(self) -> list[str]:
        """The servers a restart or retune of all acts on: the daemon's own."""
        return [s.name for s in self.fleet.own_servers]

    def check_server(self, name: str) -> None:
        if name not in self.fleet.servers:
            raise Refused(404, f"no server named {name!r} (have {', '.join(self.fleet.servers)})")

    def check_own(self, name: str, action: str) -> None:
        """An attached server (servers.attach) is never restarted, retuned or reset here:
        its kind says so (servers/server_kind.py)."""
        self.check_server(name)
        why = self.fleet.servers[name].refusal(action)
        if why is not None:
            raise Refused(409, why)

    async def audit(self, action: str, caller: c.Caller | None, request: Any,
                    result: Any) -> None:
        detail = {"request": to_plain(request), "result": to_plain(result),
                  "caller": to_plain(caller)}
        await self.astore.call(Store.add_event, EventKind.CONTROL_ACTION, action, detail,
                               actor_of(caller), self.clock())
        log.info("control: %s by %s: %s", action, actor_of(caller), to_plain(result))

    def paused(self) -> tuple[c.PauseReason, ...]:
        return tuple(c.PauseReason(k, v) for k, v in self.dispatcher.snapshot().paused.items())

    # -- actions ------------------------------------------------------------------------------

    async def max_tokens(self, req: MaxTokensRequest, caller: c.Caller | None) -> MaxTokensResult:
        actor = actor_of(caller)
        if req.continue_truncated:
            await self._check_continue(req)
        try:
            old = await self.dispatcher.set_max_tokens(req.value, actor)
        except ValueError as exc:
            raise Refused(422, str(exc)) from None
        requeued = await self.dispatcher.requeue_truncated(
            actor, at_most=req.requeue_at_most) if req.requeue_truncated else None
        if req.continue_truncated:
            got = await self.dispatcher.continue_truncated(actor, req.include_loops)
            return MaxTokensResult(old=old, new=req.value, requeued=None,
                                   continued=got.continued, from_scratch=got.from_scratch,
                                   tokens_kept=got.tokens_kept)
        return MaxTokensResult(old=old, new=req.value, requeued=requeued)

    async def _check_continue(self, req: MaxTokensRequest) -> None:
        """Whether continuing up to `req.value` is possible and exact; Refused saying why
        not, before anything changes."""
        if req.requeue_truncated:
            raise Refused(400, "max-tokens: continue_truncated and requeue_truncated exclude "
                               "each other (continue keeps the tokens, requeue re-runs)")
        live = self.job.live
        try:
            live.check_max_tokens(req.value)
        except ValueError as exc:
            raise Refused(422, str(exc)) from None
        cfg = live.config
        if not cfg.dispatch.stream:
            raise Refused(409, "continue: dispatch.stream is false, and unstreamed answers "
                               "bring no token ids back (use requeue_truncated)")
        # Off the loop: it reads the model's generation_config.json (a file on disk).
        inexact = await anyio.to_thread.run_sync(inexact_sampling, cfg.servers.flags,
                                                 cfg.servers.model_path)
        if inexact:
            raise Refused(409, f"continue: the servers sample with {'; '.join(inexact)}: a "
                               f"continuation restarts it and would not be exact (use "
                               f"requeue_truncated)")
        can = await self.astore.call(Store.continuable, req.value, req.include_loops)
        try:
            live.check_continuation(req.value, can.longest_prompt)
        except ValueError as exc:
            raise Refused(422, str(exc)) from None

    async def requeue_truncated(self, req: RequeueTruncatedRequest,
                                caller: c.Caller | None) -> RequeueResult:
        count = await self.dispatcher.requeue_truncated(actor_of(caller), req.include_loops)
        # Requeued prompts are pending now: what is still truncated below the limit is loops.
        left = await self.astore.call(Store.truncated_count, self.dispatcher.max_tokens)
        return RequeueResult("truncated", count, self.dispatcher.max_tokens, left)

    async def requeue_failed(self, req: RequeueFailedRequest,
                             caller: c.Caller | None) -> RequeueResult:
        count = await self.astore.call(Store.requeue_failed, req.reason_like, actor_of(caller))
        self.dispatcher.poke()
        return RequeueResult("failed", int(count))

    async def pause(self, req: PauseRequest, caller: c.Caller | None) -> PauseResult:
        reason = " ".join(req.reason.split())
        if not reason:
            raise Refused(400, "pause: say why (reason must not be empty)")
        if len(reason) > MAX_REASON:
            raise Refused(400, f"pause: reason longer than {MAX_REASON} characters")
        before = self.dispatcher.snapshot().paused.get(OPERATOR)
        await self.dispatcher.pause(OPERATOR, reason, actor_of(caller))
        return PauseResult(changed=before != reason, reason=reason, paused=self.paused())

    async def resume(self, req: ResumeRequest, caller: c.Caller | None) -> ResumeResult:
        snap = self.dispatcher.snapshot().paused
        lifted = []
        for key in LIFTABLE:
            if key in snap and await self.dispatcher.resume(key, actor_of(caller)):
                lifted.append(c.PauseReason(key, snap[key]))
        return ResumeResult(lifted=tuple(lifted), paused=self.paused())

    def _start_roll(self, what: str,
                    roll: Callable[[RollTicket], Awaitable[RollingResult]]) -> None:
        # Reserved before answering 202, in the fleet's own guard (which a config reload's
        # roll holds too): a second roll is a 409 now, not a 202 that waits its turn.
        try:
            ticket = self.fleet.reserve_roll(what)
        except RollBusy as exc:
            raise Refused(409, str(exc)) from None

        async def run() -> None:
            try:
                result = await roll(ticket)
                if not result.ok:
                    log.warning("control: %s stopped at %s: %s", what, result.aborted_at,
                                result.reason)
            finally:
                self.fleet.release_roll(ticket)

        self.tg.start_soon(run, name=what)

    async def restart(self, req: RestartRequest, caller: c.Caller | None) -> RestartResult:
        if req.server is not None:
            self.check_own(req.server, "restart")
        order = (req.server,) if req.server else tuple(self.server_names())
        what = f"restart of {req.server}" if req.server else "rolling restart"
        actor = actor_of(caller)
        self._start_roll(what, lambda t: self.fleet.restart(req.server, actor, t))
        return RestartResult(order=order, reason="restart requested")

    async def retune(self, req: RetuneRequest, caller: c.Caller | None) -> RetuneResult:
        if not req.flags:
            raise Refused(400, "retune: no flags given")
        if req.server is not None:
            self.check_own(req.server, "retune")
        targets = [req.server] if req.server else self.server_names()
        if not targets:
            raise Refused(409, "retune: the daemon runs no server of its own (attached servers "
                               "run the flags their own job gives them)")
        current = self.fleet.flags(targets[0])
        changes: list[FlagChange] = []
        flags: dict[str, Any] = {}
        for f in req.flags:
            if f.name not in current and not req.add:
                if f.value is None:
                    raise Refused(422, f"retune: the servers do not run with --{f.name}; "
                                       f"nothing to remove")
                have = ", ".join(current) or "none"
                raise Refused(422, f"retune: unknown flag {f.name!r}: the servers run with "
                                   f"{have} (add a new flag with add=true / --add)")
            value = list(f.value) if isinstance(f.value, tuple) else f.value
            flags[f.name] = value
            old = current.get(f.name)
            changes.append(FlagChange(f.name, None if old is None else flag_value(old),
                                      f.value))
        try:
            # Each target's flags as they would be, checked alone and against the live max
            # tokens (a context length at or below it would fail every request).
            self.job.live.retuned(flags, targets)
        except ConfigError as exc:
            raise Refused(422, f"retune: {exc}") from None
        actor = actor_of(caller)
        what = f"retune of {req.server}" if req.server else "rolling retune"
        self._start_roll(what, lambda t: self.fleet.retune(flags, req.server, actor, t))
        return RetuneResult(changes=tuple(changes), order=tuple(targets))

    async def reset(self, req: ResetRequest, caller: c.Caller | None) -> ResetResult:
        name = req.server
        self.check_own(name, "reset")
        state = self.fleet.servers[name].state
        if state is not c.ServerState.FAILED:
            raise Refused(409, f"{name} is {state.value}, not FAILED: reset only restarts a "
                               f"FAILED server (use restart)")
        if not await self.fleet.reset(name, actor_of(caller)):
            raise Refused(409, f"{name} left FAILED meanwhile")
        return ResetResult(server=name, was=c.ServerState.FAILED)

    async def log(self, req: LogRequest, caller: c.Caller | None) -> LogTail:
        if not 1 <= req.lines <= MAX_LOG_LINES:
            raise Refused(400, f"lines: expected 1..{MAX_LOG_LINES}, got {req.lines}")
        self.check_server(req.server)
        server = self.fleet.servers[req.server]
        return LogTail(server=req.server, path=str(server.log.path),
                       lines=tuple(self.fleet.recent_log(req.server, req.lines)))

    @property
    def tuner(self) -> Tuner:
        if self.job.tuner is None:
            raise Refused(503, "the tuner is not set up yet (the servers are not)")
        return self.job.tuner

    async def tune_start(self, req: TuneStartRequest, caller: c.Caller | None) -> TuneStartResult:
        try:
            return await self.tuner.start(req, actor_of(caller), self.tg)
        except TuneRefused as exc:
            raise Refused(exc.status, exc.reason) from None

    async def tune_stop(self, req: TuneStopRequest, caller: c.Caller | None) -> TuneStopResult:
        try:
            return await self.tuner.stop(actor_of(caller))
        except TuneRefused as exc:
            raise Refused(exc.status, exc.reason) from None
