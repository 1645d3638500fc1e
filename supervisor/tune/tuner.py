"""The tuner: runs the canary search in the job's task group (issue 39).

`Tuner(fleet, dispatcher, astore, live, eta=...)`; `await tuner.start(TuneStartRequest(...),
actor, tg)` starts a search (the control socket's tune-start, or `[tune] enabled`), `await
tuner.stop(actor)` ends one, `tuner.tuning()` is what the status snapshot carries.

One search: wait for every own server to be READY, judge whether a trial pays (worth.py),
measure a baseline window (canary / controls), then per candidate (search.py): retune the
canary alone (the fleet's drain-and-restart: nothing lost or duplicated), skip its warm-up,
measure a window, judge it (safety.py). A candidate not kept puts the canary back on the best
flags known. The winner is promoted to the other servers one at a time (a rolling retune) and
kept in the state DB (tune_flags), so the next daemon starts with it. A trial's crash is not
counted toward the restart policy (ManagedServer.trial).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc
import httpx

from state.async_store import AsyncStore
from state.store import Store
from state.waste_table import Wasted
from supervisor.config import TuneSection
from supervisor.config.live_settings import LiveSettings
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.server_status import Flag, flag_value
from supervisor.contract.tuning import (
    FlagRange,
    Trial,
    TrialVerdict,
    TuneStartRequest,
    TuneStartResult,
    TuneState,
    TuneStopResult,
    Tuning,
)
from supervisor.contract.waste_causes import WasteCause
from supervisor.servers.fleet import Fleet, RollBusy, RollingResult
from supervisor.servers.server_state import ServerState
from supervisor.sglang.mamba_cap import mamba_cap
from supervisor.tune.fleet_window import FleetWindow
from supervisor.tune.kept_flags import flag_lines
from supervisor.tune.long_batch import probe_bodies, run_probe
from supervisor.tune.measure import (
    Window,
    combined_noise,
    gain_of,
)
from supervisor.tune.safety import TrialOutcome, judge
from supervisor.tune.search import (
    MRR,
    Candidate,
    Search,
    ServerView,
    default_space,
    flags_change,
)
from supervisor.tune.worth import worth_it

log = logging.getLogger("supervisor.tune")
SHOWN_TRIALS = 20
BASELINE_TRIES = 3


class TuneRefused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


async def start_from_config(tuner: Tuner, tg: anyio.abc.TaskGroup) -> None:
    """`[tune] enabled = true`: the search starts with the job, as the config's."""
    try:
        result = await tuner.start(TuneStartRequest(), "config", tg)
    except TuneRefused as exc:
        log.warning("tune: [tune] enabled, but not started: %s", exc.reason)
        return
    log.info("tune: started from the config: %s", result.reason)


class Tuner:
    def __init__(self, fleet: Fleet, dispatcher: Any, astore: AsyncStore, live: LiveSettings,
                 eta: Callable[[], float | None] = lambda: None,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.fleet, self.dispatcher, self.astore, self.live = fleet, dispatcher, astore, live
        self.eta, self.clock, self.monotonic = eta, clock, monotonic
        self.state = TuneState.OFF
        self.reason = ""
        self.canary: str | None = None
        self.started_by: str | None = None
        self.best: dict[str, Any] = {}
        self.gain: float | None = None
        self.weak = False
        self.trials: list[Trial] = []
        self.search: Search | None = None
        self._scope: anyio.CancelScope | None = None
        self._stopped_by: str | None = None    # who stopped the running search
        self._current: Trial | None = None
        self._last_start_s: float | None = None
        self.figures = FleetWindow(fleet, dispatcher, lambda: self.cfg, monotonic)
        self._longest: list[list[dict[str, Any]]] | None = None

    @property
    def cfg(self) -> TuneSection:
        return self.live.config.tune

    # -- what the status shows ----------------------------------------------------------------

    def tuning(self) -> Tuning:
        s = self.search
        return Tuning(state=self.state, reason=self.reason, canary=self.canary,
                      started_by=self.started_by,
                      best=tuple(Flag(k, flag_value(v)) for k, v in self.best.items()),
                      gain=self.gain, trials_done=s.trials if s else 0,
                      trials_left=s.trials_left if s else 0,
                      trials=tuple(self.trials[-SHOWN_TRIALS:]), weak=self.weak)

    @property
    def running(self) -> bool:
        return self._scope is not None

    def _say(self, state: TuneState, reason: str) -> None:
        if (state, reason) != (self.state, self.reason):
            log.info("tune: %s: %s", state.value, reason)
        self.state, self.reason = state, reason

    def _phase(self, what: str, phase: str) -> None:
        """The open trial's phase, in the status's trial list and its reason."""
        self._say(TuneState.TRIAL, f"{what}: {phase}")
        if self._current is not None:
            self._current = replace(self._current, phase=phase)
            self.trials = [self._current if t.id == self._current.id else t
                           for t in self.trials]

    async def _event(self, kind: EventKind, subject: str, detail: dict[str, Any],
                     actor: str) -> None:
        await self.astore.call(Store.add_event, kind, subject, detail, actor, self.clock())

    # -- start and stop -----------------------------------------------------------------------

    async def start(self, req: TuneStartRequest, actor: str,
                    tg: anyio.abc.TaskGroup) -> TuneStartResult:
        """Checks the request (TuneRefused with a status and one line), then starts the search
        in `tg` and answers at once."""
        if self.running:
            raise TuneRefused(409, f"a search runs already on {self.canary} ({self.state.value})"
                                   f": stop it first")
        own = [s.name for s in self.fleet.own_servers]
        if not own:
            raise TuneRefused(409, "tune: the daemon runs no server of its own to tune")
        canary = req.server or own[0]
        if canary not in self.fleet.servers:
            raise TuneRefused(404, f"tune: no server named {canary!r} (have "
                                   f"{', '.join(self.fleet.servers)})")
        if canary not in own:
            raise TuneRefused(409, f"tune: {canary} is attached, not launched by the daemon")
        max_trials = req.max_trials if req.max_trials is not None else self.cfg.max_trials
        if max_trials < 1:
            raise TuneRefused(400, f"tune: max_trials must be >= 1, got {max_trials}")
        for r in req.space:
            if not r.values or r.name.startswith("-"):
                raise TuneRefused(400, f"tune: space {r.name!r}: a flag without dashes and "
                                       f"at least one value")
        space = req.space or tuple(FlagRange(k, tuple(v)) for k, v in self.cfg.space.items())
        self.canary, self.started_by = canary, actor
        self.trials, self.gain, self.search = [], None, None
        self.best = self.fleet.flags(canary)
        self._say(TuneState.WAITING, f"tuning {canary}: waiting for every server to be READY")
        scope = self._scope = anyio.CancelScope()
        tg.start_soon(self._run_in, scope, canary, space, max_trials, req.force, actor,
                      name=f"tuner on {canary}")
        return TuneStartResult(state=self.state, reason=self.reason, canary=canary,
                               space=space, max_trials=max_trials)

    async def stop(self, actor: str) -> TuneStopResult:
        was = self.state
        if not self.running:
            raise TuneRefused(409, f"tune: no search runs ({was.value})")
        # Answered at once: putting the canary back on the best flags is a restart (minutes),
        # followed through the event stream like any retune.
        assert self._scope is not None
        self._stopped_by = actor
        self._scope.cancel()
        s = self.search
        return TuneStopResult(was=was, trials_done=s.trials if s else 0,
                              best=tuple(Flag(k, flag_value(v)) for k, v in self.best.items()))

    # -- the search ---------------------------------------------------------------------------

    async def _run_in(self, scope: anyio.CancelScope, canary: str,
                      space: tuple[FlagRange, ...], max_trials: int, force: bool,
                      actor: str) -> None:
        try:
            with scope:
                try:
                    await self._search(canary, space, max_trials, force, actor)
                except Exception as exc:   # the job runs on: a tuner's bug stops the tuner
                    log.exception("tune: the search on %s failed", canary)
                    self._say(TuneState.OFF, f"the search failed: {exc!r}")
            if scope.cancel_called:
                await self._stopped(canary, self._stopped_by or actor)
        except anyio.get_cancelled_exc_class():
            # The daemon stops: the open trial is recorded as such; its canary is not put
            # back (the servers stop or are left for the next daemon, which starts each
            # with the flags the search kept, tune_flags).
            with anyio.CancelScope(shield=True):
                if self._current is not None:
                    await self._end_trial(self._current, TrialVerdict.ABORTED,
                                          "the daemon stopped", None)
            raise
        finally:
            self._scope = self._stopped_by = None

    async def _stopped(self, canary: str, actor: str) -> None:
        """The operator stopped it (a daemon stop cancels the task group and ends here
        without a retune): a trial in progress is aborted, its canary put back."""
        with anyio.CancelScope(shield=True):
            if self._current is not None:
                await self._end_trial(self._current, TrialVerdict.ABORTED, "stopped by the "
                                      "operator", None)
            # Also when no trial was open: a retune back may have been cut short.
            await self._retune(canary, self.best, actor, "back to the best flags known")
            self._say(TuneState.OFF, f"stopped by {actor}")
            await self._event(EventKind.TUNE_STOPPED, canary,
                              {"why": self.reason, "best": self.best}, actor)

    async def _search(self, canary: str, space: tuple[FlagRange, ...], max_trials: int,
                      force: bool, actor: str) -> None:
        await self._wait_all_ready()
        snap = {s.name: s for s in self.fleet.snapshot()}[canary]
        controls = [s.name for s in self.fleet.snapshot()
                    if s.name != canary and s.state is ServerState.READY]
        self.weak = not controls
        if not space:
            # What SGLang chose: the effective max running requests its /server_info gave
            # (the fleet's READY life reads it), its queue and KV use, the Mamba cap it logged.
            log_lines = self.fleet.recent_log(canary, 5000)
            view = ServerView(effective_mrr=snap.max_running or None,
                              queue_reqs=snap.sglang.queued, token_usage=snap.sglang.token_usage,
                              mamba=mamba_cap(log_lines))
            space = default_space(self.best, view)
        search = self.search = Search(dict(self.best), space, max_trials)
        while self.eta() is None and not force:
            self._say(TuneState.WAITING, f"tuning {canary}: waiting for the job's ETA (to "
                                         f"judge whether a trial pays)")
            await anyio.sleep(self.cfg.sample_s)
        worth = worth_it(self.eta(), self._startup_s(), self.cfg.min_window_s,
                         len(self.fleet.own_servers), force)
        await self._event(EventKind.TUNE_STARTED, canary, {
            "space": {r.name: list(r.values) for r in space}, "max_trials": max_trials,
            "controls": controls, "weak": self.weak, "worth": worth.reason}, actor)
        if not worth.pays:
            self._say(TuneState.NOT_WORTH_IT, worth.reason)
            await self._event(EventKind.TUNE_STOPPED, canary, {"why": worth.reason}, actor)
            return
        weak = " (one server: the canary before vs after, a weaker measure)" if self.weak else ""
        self._say(TuneState.MEASURING, f"baseline window on {canary}{weak}")
        before = await self._baseline(canary, controls)
        while (candidate := search.next()) is not None:
            before = await self._trial(canary, controls, candidate, before, actor)
        stopped = await self._promote(canary, actor) if search.gained() else None
        done = f"{search.trials} trials; best: {search.gained() or 'the start'}"
        self._say(TuneState.DONE, done if stopped is None else f"{done}; {stopped}")
        await self._event(EventKind.TUNE_STOPPED, canary,
                          {"why": self.reason, "best": self.best, "gain": self.gain}, actor)

    async def _baseline(self, canary: str, controls: list[str]) -> Window:
        """The baseline window; measured again (up to BASELINE_TRIES) while a control
        leaves READY during it."""
        for _ in range(BASELINE_TRIES - 1):
            window, disturbed = await self.figures.window(canary, controls, None)
            if disturbed is None:
                return window
            self._say(TuneState.MEASURING, f"baseline on {canary} again: {disturbed}")
        return (await self.figures.window(canary, controls, None))[0]

    async def _trial(self, canary: str, controls: list[str], c: Candidate, before: Window,
                     actor: str) -> Window:
        """One candidate: returns the window the next trial compares against."""
        assert self.search is not None
        tid = await self.astore.call(Store.add_tune_trial, canary, c.changed, c.flags,
                                     self.clock())
        trial = self._current = Trial(id=tid, server=canary, changed=c.changed,
                                      flags=tuple(Flag(k, flag_value(v)) for k, v in c.flags.items()),
                                      started_at=self.clock())
        self.trials.append(trial)
        self._say(TuneState.TRIAL, f"trial {tid} on {canary}: {c.changed}")
        await self._event(EventKind.TUNE_TRIAL, canary, {"id": tid, "changed": c.changed,
                                                         "phase": "restarting"}, actor)
        server = {s.name: s for s in self.fleet.own_servers}[canary]
        # From the restart to the verdict, the candidate's crashes are the trial's, not the
        # server's: counted toward nothing that marks it FAILED (managed_server.py).
        server.trial = f"tuning trial {tid}"
        try:
            outcome, after = await self._candidate(canary, controls, c, tid, before, actor)
        finally:
            server.trial = None
        verdict, why = judge(outcome)
        self.search.report(c, verdict)
        await self._end_trial(trial, verdict, why, (before, after, outcome))
        if verdict is TrialVerdict.KEPT:
            assert after is not None
            self.best = dict(c.flags)
            self.gain = (1 + (self.gain or 0.0)) * (1 + (outcome.gain or 0.0)) - 1
            await self.astore.call(Store.set_tune_flags, canary, self.best, self.clock(), tid)
            return after
        await self._retune(canary, self.best, actor, f"trial {tid} {verdict.value}: back to "
                                                     f"the best flags known")
        return before

    async def _candidate(self, canary: str, controls: list[str], c: Candidate, tid: int,
                         before: Window, actor: str) -> tuple[TrialOutcome, Window | None]:
        """The candidate's restart, window and long-batch probe: how it went."""
        result = await self._retune(canary, c.flags, actor, f"trial {tid}: {c.changed}")
        if not result.ok:
            return TrialOutcome(False, result.reason or "not READY"), None
        self._phase(f"trial {tid} on {canary}", "warming")
        after: Window | None = None
        disturbed: str | None = None
        retracted_at = self.figures.retractions(canary)
        died = await self.figures.warm_up(canary)
        if died is None:
            self._phase(f"trial {tid} on {canary}", "measuring")
            after, disturbed = await self.figures.window(canary, controls, before)
            died = self.figures.left_ready(canary)
        retracted = self.figures.retractions(canary)
        outcome = TrialOutcome(
            True, died=died, gain=gain_of(before, after) if after else None,
            noise=combined_noise(before, after) if after else None,
            noise_k=self.cfg.noise_k, answers=after.answers if after else 0,
            retracted=None if retracted is None or retracted_at is None
            else retracted - retracted_at, disturbed=disturbed)
        if judge(outcome)[0] is TrialVerdict.KEPT and self.cfg.long_batch:
            self._phase(f"trial {tid} on {canary}", "long-batch")
            outcome = replace(outcome, probe=await self._long_batch(canary))
        return outcome, after

    async def _end_trial(self, trial: Trial, verdict: TrialVerdict, why: str,
                         figures: tuple[Window, Window | None, TrialOutcome] | None) -> None:
        fields: dict[str, Any] = {"ended_at": self.clock(), "verdict": verdict, "reason": why}
        if figures is not None:
            before, after, o = figures
            fields.update(ratio_before=before.ratio, gain=o.gain, noise=o.noise)
            if after is not None:
                fields.update(window_s=after.span_s, answers=after.answers,
                              canary_tok_s=after.canary_tok_s,
                              controls_tok_s=after.controls_tok_s, ratio_after=after.ratio)
        await self.astore.call(Store.end_tune_trial, trial.id, **fields)
        ended = replace(trial, phase="ended", **fields)
        self.trials = [ended if t.id == trial.id else t for t in self.trials]
        self._current = None
        log.info("tune: trial %d on %s (%s): %s: %s", trial.id, trial.server, trial.changed,
                 verdict.value, why)
        await self._event(EventKind.TUNE_TRIAL, trial.server,
                          {"id": trial.id, "changed": trial.changed, "phase": "ended",
                           **{k: (str(v) if k == "verdict" else v) for k, v in fields.items()}},
                          "supervisor")

    async def _promote(self, canary: str, actor: str) -> str | None:
        """The winner to every other own server, one at a time; its config lines logged.
        Where a server does not come up with it (another GPU, less free memory), that server
        goes back to its own flags, not counted toward FAILED, and the roll-out stops there:
        the reason is returned."""
        others = [s for s in self.fleet.own_servers if s.name != canary]
        for server in others:
            self._say(TuneState.PROMOTING, f"promoting the best flags to {server.name}")
            own = self.fleet.flags(server.name)
            server.trial = f"promotion of the tuner's flags to {server.name}"
            try:
                result = await self._retune(server.name, self.best, actor, "promotion")
            finally:
                server.trial = None
            if not result.ok:
                why = f"promotion stopped at {server.name}: {result.reason}"
                log.warning("tune: %s", why)
                await self._retune(server.name, own, actor, "promotion failed: back")
                return why
            await self.astore.call(Store.set_tune_flags, server.name, self.best, self.clock(),
                                   None)
            await self._event(EventKind.TUNE_PROMOTED, server.name, {"flags": self.best},
                              actor)
        log.info("tune: put these lines in the config to keep the flags found:\n%s",
                 "\n".join(flag_lines(self.best)))
        return None

    async def _long_batch(self, canary: str) -> str | None:
        """long_batch.py: a full batch of the longest prompts; None when it went through."""
        snap = {x.name: x for x in self.fleet.snapshot()}[canary]
        slots = snap.max_running or int(self.fleet.flags(canary).get(MRR, 0) or 0)
        if self._longest is None:
            self._longest = await self.astore.call(Store.longest_prompts, max(1, slots))
        cfg = self.live.config
        bodies = probe_bodies(self._longest, slots, cfg.job.model, cfg.generation,
                              self.dispatcher.max_tokens)
        if not bodies:
            return None
        base_url = {s.name: s for s in self.fleet.own_servers}[canary].spec.base_url
        # trust_env=False: a proxy in the daemon's environment must never route loopback.
        async with httpx.AsyncClient(trust_env=False) as client:
            got = await run_probe(client, base_url, bodies, cfg.dispatch.request_timeout_s,
                                  lambda: self.figures.left_ready(canary))
        if got.tokens:
            # Decoded and thrown away: goodput counts it against the job like any waste.
            await self.astore.call(Store.record, [Wasted(WasteCause.PROBE, got.tokens,
                                                         self.clock(), server=canary)])
        return got.failure

    # -- the fleet and the figures ------------------------------------------------------------

    async def _retune(self, name: str, flags: Mapping[str, Any], actor: str,
                      why: str) -> RollingResult:
        change = flags_change(self.fleet.flags(name), flags)
        if not change:
            return RollingResult((name,))
        while True:
            try:
                ticket = self.fleet.reserve_roll(f"tuner: {why}")
            except RollBusy:
                await anyio.sleep(1.0)     # an operator's roll runs: the tuner waits its turn
                continue
            began = self.monotonic()
            result = await self.fleet.retune(change, name, actor, ticket)
            if result.ok:
                self._last_start_s = self.monotonic() - began
            return result

    async def _wait_all_ready(self) -> None:
        while not all(s.state is ServerState.READY for s in self.fleet.own_servers):
            with anyio.move_on_after(5.0):
                await self.fleet.wait_changed()

    def _startup_s(self) -> float:
        """The last restart the tuner saw take (drain, stop, load), else a quarter of the
        startup timeout (a model load on a real node takes a few minutes of its 20)."""
        if self._last_start_s is not None:
            return self._last_start_s
        return float(self.live.config.servers.startup_timeout_s) / 4
