"""The dispatcher: keeps every READY server's slots full and records each outcome.

This module is the face the rest of the daemon sees (the fleet calls `serve` for each READY
life, the control socket pauses and sets max tokens, the status reads `snapshot`); the work
is in three parts, each one idea:
- feeding.py: a feeder and workers per server life, claiming prompts into a small buffer;
- request_path.py: one prompt's request, from the body sent to the outcome recorded;
- pauses.py: why dispatch is paused, one reason per source, each lifted on its own.
The recorder (recorder.py) commits outcomes in groups; the job's settings are read from the
live settings (config/live_settings.py) at the moment each is needed, never copied here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc

from state.async_store import AsyncStore
from state.records import Retry
from state.settings_keys import Setting
from state.store import Store
from state.token_ids_table import ContinueCounts
from supervisor.config import JobConfig
from supervisor.config.live_settings import LiveSettings
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.pause_sources import PauseSource
from supervisor.dispatch.bad_output_pause import BadOutputPause
from supervisor.dispatch.dispatch_figures import DispatchFigures
from supervisor.dispatch.dispatch_snapshot import DispatchSnapshot, InFlightRequest, ServerProgress
from supervisor.dispatch.error_breaker import ErrorBreaker
from supervisor.dispatch.event_fold import EventFold
from supervisor.dispatch.feeding import Feeding
from supervisor.dispatch.length_eta import LengthEta
from supervisor.dispatch.output_lengths import LengthWindow
from supervisor.dispatch.pauses import Pauses
from supervisor.dispatch.quality import QualityGate
from supervisor.dispatch.rate_window import CompletionRateWindow
from supervisor.dispatch.recorder import Recorder
from supervisor.dispatch.request_path import GONE_GRACE_S, RequestPath
from supervisor.dispatch.stall_watch import StallWindow
from supervisor.servers.endpoint import Endpoint
from supervisor.servers.inflight_limit import InFlightLimit

log = logging.getLogger("supervisor.dispatch")


class Dispatcher:
    def __init__(self, astore: AsyncStore, live: LiveSettings | JobConfig, *,
                 clock: Callable[[], float] = time.time,
                 gone_grace_s: float = GONE_GRACE_S) -> None:
        self.astore = astore
        # A bare config (a test, a tool) gets live settings of its own.
        self.live = live if isinstance(live, LiveSettings) else LiveSettings(live)
        self.clock = clock
        config = self.live.config
        q, d = config.quality, config.dispatch
        self.quality = QualityGate(q.window, q.min_samples, q.max_bad_rate,
                                   q.max_truncation_rate, q.max_loop_rate,
                                   q.max_thinking_truncated_rate)
        self.breaker = ErrorBreaker(d.breaker_window, d.breaker_min_samples, d.breaker_error_rate)
        self.figures = DispatchFigures(q.metrics_window_s, clock)
        self.pauses = Pauses(astore, clock, self.poke)
        self.pauses.on_resume = {PauseSource.QUALITY: self.quality.reset,
                                 PauseSource.BREAKER: self.breaker.reset}
        self._bad_output = BadOutputPause(self.quality, config.generation.enable_thinking,
                                          self.pauses, self._paused_on_bad_output)
        self._recorder = Recorder(self._write, on_committed=self._after_commit)
        self._tg: anyio.abc.TaskGroup | None = None
        self._stalls = StallWindow(d.stall_hang_count, d.stall_hang_window_s)
        # Per-request events (loops aborted, stalls) folded to one row per server per window.
        self._fold = EventFold(lambda *e: self.astore.call(Store.add_event, *e), clock=clock)
        self._path = RequestPath(self.live, self.figures, self._recorder, self.pauses,
                                 self._bad_output, self.breaker, self._stalls, self._event,
                                 clock=clock, gone_grace_s=gone_grace_s)
        self._feeding = Feeding(astore, self.live, self.pauses, self._recorder, self._path,
                                self.figures, self._stalls, clock)
        self.live.subscribe(self._follow)

    # -- what others read of it (figures live in DispatchFigures) -----------------------------

    @property
    def config(self) -> JobConfig:
        return self.live.config

    @property
    def max_tokens(self) -> int:
        return self.live.max_tokens

    @property
    def rates(self) -> CompletionRateWindow:
        return self.figures.rates

    @property
    def lengths(self) -> LengthWindow:
        return self.figures.lengths

    @property
    def eta(self) -> LengthEta:
        return self.figures.eta

    @property
    def started_at(self) -> float:
        return self.figures.started_at

    # -- lifetime -----------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Dispatcher]:
        """The recorder lives here; serve() may only run inside."""
        saved = await self.astore.call(Store.get_setting, Setting.MAX_TOKENS)
        if saved is not None:
            self.live.restore_max_tokens(int(saved))
        await self.pauses.restore()
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._recorder.run, name="recorder")
                tg.start_soon(self._fold.run, name="event-fold")
                try:
                    yield self
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._fold.close()
                        await self._recorder.close()
        finally:
            self._tg = None

    async def serve(self, endpoint: Endpoint, draining: anyio.Event) -> None:
        """Keep `endpoint`'s slots full until `draining` is set or this is cancelled
        (feeding.py)."""
        await self._feeding.serve(endpoint, draining)

    async def _write(self, outcomes: list[Any]) -> None:
        await self.astore.call(Store.record, outcomes)

    def _after_commit(self, batch: list[Any]) -> None:
        # A retry makes its prompt claimable again: wake idle feeders.
        if any(isinstance(o, Retry) for o in batch):
            self.poke()

    async def flush(self) -> None:
        await self._recorder.flush()

    def _event(self, kind: str, subject: str, detail: dict[str, Any], actor: str) -> None:
        folded = self._fold.admit(kind, subject, detail, actor, self.clock())
        if folded is None:
            return
        detail = folded

        async def add() -> None:
            await self.astore.call(Store.add_event, kind, subject, detail, actor, self.clock())
        if self._tg is not None:
            self._tg.start_soon(add)

    # -- what others read ---------------------------------------------------------------------

    def progress(self, name: str) -> ServerProgress:
        return self.figures.progress(name)

    def snapshot(self) -> DispatchSnapshot:
        now = self.clock()
        f = self.figures
        return DispatchSnapshot(
            max_tokens=self.max_tokens, paused=self.pauses.snapshot(),
            in_flight=f.in_flight, rates=f.rates.snapshot(now),
            per_server=f.per_server(now),
            quality=self.quality.snapshot(), breaker=self.breaker.snapshot(),
            streamed=f.streamed)

    @property
    def paused(self) -> bool:
        return bool(self.pauses)

    def inflight_limit(self, server: str) -> InFlightLimit | None:
        """The live in-flight limit of `server`'s READY life (None when not serving it)."""
        return next((s.limit for s in self._feeding.serving.values()
                     if s.endpoint.name == server), None)

    def in_flight_requests(self) -> list[InFlightRequest]:
        return list(self._path.requests.values())

    def completed_total(self) -> int:
        """Outcomes of any kind since the daemon started."""
        return self.figures.completed_total()

    def server_tok_per_s(self) -> dict[str, float]:
        return {n: r.tok_per_s for n, r in self.figures.per_server(self.clock()).items()}

    # -- graceful stop and settings ------------------------------------------------------------

    def stop_claiming(self) -> None:
        """The first step of a graceful stop: claim and send nothing more, give buffered
        prompts back; requests in flight run to their end."""
        self._feeding.stopping = True
        self.poke()

    @property
    def stopping(self) -> bool:
        return self._feeding.stopping

    def _follow(self, config: JobConfig) -> None:
        """The live settings changed (a reload): quality thresholds apply to the next
        completion, breaker and stall settings to the next error; generation settings and
        dispatch limits are read per request from the live settings already."""
        q = config.quality
        self.quality.min_samples = q.min_samples
        self.quality.max_bad_rate = q.max_bad_rate
        self.quality.max_truncation_rate = q.max_truncation_rate
        self.quality.max_loop_rate = q.max_loop_rate
        self.quality.max_thinking_truncated_rate = q.max_thinking_truncated_rate
        d = config.dispatch
        self.breaker.window = d.breaker_window
        self.breaker.min_samples = d.breaker_min_samples
        self.breaker.max_error_rate = d.breaker_error_rate
        self._stalls.stalls, self._stalls.window_s = d.stall_hang_count, d.stall_hang_window_s
        self._bad_output.thinking = config.generation.enable_thinking
        self.poke()

    # -- operator actions (the control socket calls these) -------------------------------------

    def poke(self) -> None:
        self._feeding.poke()

    async def pause(self, key: PauseSource | str, reason: str, actor: str) -> None:
        """Stop claiming new prompts; in-flight requests finish. `key` names the source
        (contract/pause_sources.py), so each is lifted on its own."""
        await self.pauses.pause(key, reason, actor)

    async def resume(self, key: PauseSource | str, actor: str) -> bool:
        return await self.pauses.resume(key, actor)

    async def set_max_tokens(self, value: int, actor: str) -> int:
        """Applies to requests sent from now on; in-flight ones finish at their old limit.
        Checked by the live settings against every server's context length (SGLang refuses
        every request whose prompt plus max_tokens reaches it): ValueError saying why."""
        old = self.live.set_max_tokens(value)
        await self.astore.call(Store.set_setting, Setting.MAX_TOKENS, str(value))
        await self.astore.call(Store.add_event, EventKind.MAX_TOKENS, "generation",
                               {"from": old, "to": value}, actor, self.clock())
        return old

    async def requeue_truncated(self, actor: str, include_loops: bool = False,
                                at_most: int | None = None) -> int:
        """Re-run every prompt that ended with finish_reason length under a lower limit than
        the current one (the earliest `at_most` of them, when the caller showed a count);
        its new result replaces its line in its shard. Degenerate loops are left alone
        unless `include_loops`: they would loop again, at the new limit."""
        # A requeue from scratch ends what an earlier raise with continue asked of the
        # requests still in flight.
        self._path.continue_below = None
        count = await self.astore.call(Store.requeue_truncated, self.max_tokens, include_loops,
                                       at_most)
        detail: dict[str, object] = {"count": count, "below_max_tokens": self.max_tokens,
                                     "include_loops": include_loops}
        if at_most is not None:
            detail["shown"] = at_most
        await self.astore.call(Store.add_event, EventKind.REQUEUE_TRUNCATED, "generation",
                               detail, actor, self.clock())
        self.poke()
        return count

    async def continue_truncated(self, actor: str, include_loops: bool = False
                                 ) -> ContinueCounts:
        """Continue every answer cut off under a lower limit than the current one from its
        exact tokens, before any fresh prompt; those with no stored tokens run again from
        the start. From now on a request sent under a lower limit that ends truncated is
        continued at once too (it was in flight at the raise)."""
        # Set before the store's pass: an answer recorded meanwhile is either in it or
        # caught by this.
        self._path.continue_below = (self.max_tokens, include_loops)
        got = await self.astore.call(Store.continue_truncated, self.max_tokens, include_loops)
        await self.astore.call(Store.add_event, EventKind.CONTINUE_TRUNCATED, "generation",
                               {"continued": got.continued, "from_scratch": got.from_scratch,
                                "tokens_kept": got.tokens_kept,
                                "below_max_tokens": self.max_tokens,
                                "include_loops": include_loops}, actor, self.clock())
        if got.from_scratch:
            log.warning("%d truncated answers had no stored tokens: re-run from the start",
                        got.from_scratch)
        self.poke()
        return got

    def _paused_on_bad_output(self, reason: str, problems: tuple[str, ...]) -> None:
        self._event(EventKind.PAUSED, PauseSource.QUALITY,
                    {"reason": reason, "problems": list(problems)}, "quality-gate")
        self.poke()
