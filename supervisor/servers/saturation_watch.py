"""Watching one server for saturation: each SGLang /metrics poll (sglang_monitor.py) goes to
the saturation guard's policy (saturation_guard.py); what it decides moves the server's live
in-flight limit (inflight_limit.py, which the dispatcher's workers honour) and is said once,
in the log and as an `inflight_limit` event with the old and new limit and why.

The guard belongs to one READY life: a new life (a new limit object from the dispatcher)
starts a new guard at the server's max, so a restart resets the limit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from supervisor.config import DispatchSection
from supervisor.contract.event_kinds import EventKind
from supervisor.servers.inflight_limit import InFlightLimit
from supervisor.servers.queue_ahead import net_of_queue_ahead
from supervisor.servers.saturation_guard import GuardPolicy, GuardPoll, SaturationGuard
from supervisor.servers.sglang_view import SglangView

log = logging.getLogger("supervisor.servers")


def policy_of(d: DispatchSection) -> GuardPolicy:
    return GuardPolicy(floor=d.saturation_floor, calm_s=d.saturation_calm_s,
                       settle_s=max(1.0, d.saturation_calm_s / 3),
                       collapse_ratio=d.saturation_collapse_ratio)


class SaturationWatch:
    def __init__(self, name: str, dispatch: Callable[[], DispatchSection],
                 limit: Callable[[], InFlightLimit | None],
                 emit: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None) -> None:
        self.name = name
        self._dispatch = dispatch          # read at each poll: a reload may switch it off
        self._limit = limit
        self._emit = emit
        self._guard: SaturationGuard | None = None
        self._for: InFlightLimit | None = None

    async def on_poll(self, view: SglangView, at: float, in_flight: int) -> None:
        """One poll's figures (`at` monotonic seconds)."""
        d = self._dispatch()
        limit = self._limit()
        if limit is None:
            return
        if not d.saturation_guard:
            if limit.limit < limit.max:       # switched off by a reload: the max again
                await self._apply(limit, limit.max, "the saturation guard was switched off")
            self._guard = self._for = None
            return
        policy = policy_of(d)
        if self._guard is None or limit is not self._for:
            self._guard, self._for = SaturationGuard(limit.max, policy), limit
        elif self._guard.policy != policy:
            self._guard.retune(policy)          # a reload changed the guard's settings
        # Our queue ahead is expected in SGLang's queue, not a sign (queue_ahead.py).
        net = net_of_queue_ahead(in_flight, view.queued, limit.ahead)
        change = self._guard.observe(GuardPoll(
            at=at, overcommitted=view.overcommitted, overcommit_reason=view.overcommit_reason,
            running=view.running, gen_throughput=view.gen_throughput, in_flight=net.in_flight,
            figures=view.error is None, queued=net.queued, token_usage=view.token_usage,
            retracting=view.retracting))
        if change is not None:
            await self._apply(limit, change.new, change.reason, self._guard.reason)

    async def _apply(self, limit: InFlightLimit, new: int, why: str,
                     cause: str | None = None) -> None:
        old = limit.limit
        now = limit.set(new, cause)
        if now == old:
            return
        if now < old:
            log.warning("%s: in-flight limit %d -> %d of %d: %s", self.name, old, now,
                        limit.max, why)
        else:
            log.info("%s: in-flight limit %d -> %d of %d: %s", self.name, old, now,
                     limit.max, why)
        if self._emit is not None:
            with anyio.CancelScope(shield=True):
                await self._emit(EventKind.INFLIGHT_LIMIT,
                                 {"from": old, "to": now, "max": limit.max, "reason": why})
