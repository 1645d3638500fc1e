"""Dispatch pauses: one reason per source (contract/pause_sources.py), each lifted on its own.

While any source holds a pause, the feeders claim nothing and give their buffered prompts
back; requests in flight run to their end. An operator's pause is kept in the state DB so a
restarted daemon stays paused; every pause and resume is an event. Resuming after the quality
gate or the breaker clears that detector's window (the operator fixed or accepts the cause;
the old window, full of what tripped it, would trip it again at the next answer).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from state.async_store import AsyncStore
from state.settings_keys import Setting
from state.store import Store
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.pause_sources import PauseSource

log = logging.getLogger("supervisor.dispatch")


class Pauses:
    def __init__(self, astore: AsyncStore, clock: Callable[[], float],
                 on_change: Callable[[], None]) -> None:
        self.astore = astore
        self.clock = clock
        self.on_change = on_change          # wakes the feeders
        self.reasons: dict[PauseSource, str] = {}
        # What resuming a source also resets (its detector's window).
        self.on_resume: dict[PauseSource, Callable[[], None]] = {}

    def __bool__(self) -> bool:
        return bool(self.reasons)

    def __contains__(self, source: object) -> bool:
        return source in self.reasons

    def snapshot(self) -> dict[str, str]:
        return {str(k): v for k, v in self.reasons.items()}

    async def restore(self) -> None:
        """An operator's pause saved by an earlier run of this job."""
        saved = await self.astore.call(Store.get_setting, Setting.OPERATOR_PAUSE)
        if saved:
            self.reasons[PauseSource.OPERATOR] = saved

    def hold(self, source: PauseSource, reason: str) -> bool:
        """A detector's own pause, taken at once (no await: it decides inside an answer's
        bookkeeping); the caller writes the event. False when already held."""
        if source in self.reasons:
            return False
        self.reasons[source] = reason
        log.error("dispatch paused (%s): %s", source, reason)
        self.on_change()
        return True

    async def pause(self, source: PauseSource | str, reason: str, actor: str) -> None:
        source = PauseSource(source)
        if self.reasons.get(source) == reason:
            return
        self.reasons[source] = reason
        log.warning("dispatch paused (%s): %s", source, reason)
        if source is PauseSource.OPERATOR:
            await self.astore.call(Store.set_setting, Setting.OPERATOR_PAUSE, reason)
        await self.astore.call(Store.add_event, EventKind.PAUSED, str(source),
                               {"reason": reason}, actor, self.clock())
        self.on_change()

    async def resume(self, source: PauseSource | str, actor: str) -> bool:
        source = PauseSource(source)
        if source not in self.reasons:
            return False
        reason = self.reasons.pop(source)
        if source is PauseSource.OPERATOR:
            await self.astore.call(Store.set_setting, Setting.OPERATOR_PAUSE, "")
        reset = self.on_resume.get(source)
        if reset is not None:
            reset()
        log.info("dispatch resumed (%s)", source)
        await self.astore.call(Store.add_event, EventKind.RESUMED, str(source), {"was": reason},
                               actor, self.clock())
        self.on_change()
        return True
