"""Watching one READY server through SGLang's own `/metrics`: the figures the status shows,
and the over-commit flag (overcommit.py), said once in the log and the events table when it
turns on and once when it turns off.

Polled only where there is something to read: when the server's command line has
`--enable-metrics` (the daemon adds it unless the job's flags switch it off), or else when a
first scrape finds SGLang metrics anyway (a wrapper that enables them); a server without
them is asked once per life, not every interval, and its status says the detection that
reads them is blind. With the flag, a failed scrape is retried at every interval. Each poll
starts when the previous one has finished and the interval has passed, so a slow server
slows its polling down instead of piling up scrapes.

It also keeps SGLang's token clock for the hang watchdog (watchers.py): when its generated-
token counter last moved, and which counter that is ("decode": per decode step, a token
signal; "finished": per finished request only, a completion signal), and says whether the
server is queueing or retracting now (a silent request there is waiting, not stuck).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import anyio
import httpx

from supervisor.contract.event_kinds import EventKind
from supervisor.servers.overcommit import (
    Observation,
    OvercommitChange,
    OvercommitDetector,
    OvercommitPolicy,
)
from supervisor.servers.queue_ahead import net_of_queue_ahead
from supervisor.servers.sglang_view import SglangView
from supervisor.sglang.metrics import Scrape, SglangMetrics, metrics_enabled, scrape

log = logging.getLogger("supervisor.servers")

# A scrape is a read of a few shared-memory files inside SGLang: anything slower than this
# is a busy or sick server, and the figures can wait for the next poll.
SCRAPE_TIMEOUT_S = 5.0

EVENT_KIND = EventKind.SERVER_OVERCOMMIT

# What the status says of a server run without SGLang's metrics (the job's flags set
# enable-metrics = false; the daemon's own default is on, launch_command.py).
BLIND = ("no SGLang /metrics (enable-metrics off): over-commit, saturation and waiting "
         "detection are blind")


class SglangMonitor:
    """One per server; `watch()` runs beside a READY life, `end_life()` after it."""

    def __init__(self, name: str, policy: OvercommitPolicy | None = None,
                 clock: Callable[[], float] | None = None,
                 emit: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None,
                 on_poll: Callable[[SglangView, float, int], Awaitable[None]] | None = None,
                 ahead: Callable[[], int] = lambda: 0) -> None:
        self.name = name
        # The queue ahead the dispatcher keeps now: the flag reads SGLang's queue net of it
        # (queue_ahead.py).
        self._ahead = ahead
        # Each poll's view, its monotonic time and our in-flight count (the saturation
        # guard, saturation_watch.py).
        self._on_poll = on_poll
        self.policy = policy or OvercommitPolicy()
        self.view = SglangView()
        self._clock = clock
        self._emit = emit               # async (kind, detail): one row in the events table
        self._detector = OvercommitDetector(self.policy)
        self._last: tuple[float, float] | None = None   # (monotonic, retractions_total)
        # SGLang's token counter this life: its kind, last value, and when it last moved
        # (monotonic; the first reading counts as a move: the life has just begun).
        self.token_counter: str | None = None
        self.tokens_moved_at: float | None = None
        self._tokens: float | None = None
        self._interval_s: float | None = None   # the running watch's, for the view

    async def watch(self, client: httpx.AsyncClient, base_url: str, argv: Sequence[str],
                    interval_s: float, in_flight: Callable[[], int],
                    timeout_s: float = SCRAPE_TIMEOUT_S) -> None:
        """Until cancelled (the life's end)."""
        timeout_s = min(timeout_s, max(interval_s, 0.5))
        # A client judges a sample's age against this: a healthy poll comes every interval
        # plus milliseconds; a scrape slow to answer (up to timeout_s) leaves the last
        # sample in place, and it ages.
        self._interval_s = interval_s
        enabled = metrics_enabled(argv)
        try:
            while True:
                await anyio.sleep(interval_s)
                result = await scrape(client, base_url, timeout_s)
                if not enabled and not result.ok:
                    log.debug("%s: no SGLang metrics to read (%s)", self.name, result.error)
                    self.view = SglangView(error=BLIND)
                    return
                # With the flag, a failed scrape (a busy server, gauges not yet logged) is
                # shown as n/a with its reason and tried again at the next interval.
                enabled = True
                await self.take(result, anyio.current_time(), in_flight())
        except Exception:
            # These figures only inform: a bug here must not end the server's life (this
            # runs beside the watchers that do), so it stops the figures and says why.
            log.exception("%s: reading SGLang's /metrics stopped", self.name)
            self.view = SglangView(polled=True, error="reading /metrics stopped (see the log)")

    async def take(self, result: Scrape, now: float, in_flight: int) -> None:
        """One poll's outcome: update the view, feed the detector, say a change of the flag."""
        m = result.metrics
        if m is None:
            self.view = replace(self.view, polled=True, running=None, queued=None,
                                token_usage=None, retractions_per_min=None,
                                gen_throughput=None, error=result.error,
                                interval_s=self._interval_s)
            return
        rate = None
        if m.retractions_total is not None:
            if self._last is not None and now > self._last[0] \
                    and m.retractions_total >= self._last[1]:
                rate = (m.retractions_total - self._last[1]) / (now - self._last[0]) * 60.0
            self._last = (now, m.retractions_total)
        self._token_clock(m, now)
        net = net_of_queue_ahead(in_flight, m.queued, self._ahead())
        change = self._detector.observe(Observation(
            at=now, running=m.running, queued=net.queued,
            retractions_total=m.retractions_total, in_flight=net.in_flight))
        self.view = SglangView(
            polled=True, running=m.running, queued=m.queued, token_usage=m.token_usage,
            retractions_total=m.retractions_total, retractions_per_min=rate,
            gen_throughput=m.gen_throughput, error=None,
            scraped_at=self._clock() if self._clock else None, interval_s=self._interval_s,
            overcommitted=self._detector.overcommitted,
            overcommit_reason=self._detector.reason,
            retracting=self._detector.retracting)
        if change is not None:
            await self._say(change, in_flight)
        if self._on_poll is not None:
            await self._on_poll(self.view, now, in_flight)

    def _token_clock(self, m: SglangMetrics, now: float) -> None:
        kind, value = ("decode", m.decode_tokens_total) if m.decode_tokens_total is not None \
            else ("finished", m.generation_tokens_total)
        if value is None:
            return
        if kind != self.token_counter or self._tokens is None or value > self._tokens:
            self.tokens_moved_at = now
        self.token_counter, self._tokens = kind, value

    @property
    def queueing(self) -> bool:
        """SGLang holds requests back now: some wait in its queue, it retracted some since
        the last poll, or it is flagged over-committed. A request silent there is waiting
        for KV room, not stuck (SGLang admits by KV token budget, and retracts running
        requests back to the queue when the pool fills: `sglang/srt/managers/scheduler.py`
        get_next_batch_to_run, schedule_batch.py retract_decode). Our own queue ahead
        (queue_ahead.py) is not SGLang holding requests back: only a queue beyond it counts,
        or every stall on a stuck server would requeue for free."""
        v = self.view
        queued = net_of_queue_ahead(0, v.queued, self._ahead()).queued
        return bool(self._detector.overcommitted or (queued or 0) > 0
                    or (v.retractions_per_min or 0) > 0)

    async def end_life(self) -> None:
        """The server left READY: its figures are gone, and a flag that was on ends here
        (the next life starts with a fresh detector and a fresh counter)."""
        was_on = self._detector.overcommitted
        self._detector = OvercommitDetector(self.policy)
        self._last = None
        self.token_counter = self.tokens_moved_at = self._tokens = None
        self.view = SglangView()
        if was_on:
            await self._say(OvercommitChange(False, "the server left READY"), None)

    async def _say(self, change: OvercommitChange, in_flight: int | None) -> None:
        if change.on:
            log.warning("%s: over-committed: %s", self.name, change.reason)
        else:
            log.info("%s: no longer over-committed: %s", self.name, change.reason)
        if self._emit is None:
            return
        v = self.view
        detail: dict[str, Any] = {"overcommitted": change.on, "reason": change.reason}
        if change.on:
            detail.update(running=v.running, queued=v.queued, in_flight=in_flight,
                          token_usage=v.token_usage, retractions_total=v.retractions_total)
        with anyio.CancelScope(shield=True):
            await self._emit(EVENT_KIND, detail)
