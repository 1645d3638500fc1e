"""The status hub: builds snapshots, follows the events table, fans both out to readers.

One snapshot is built and serialised per interval however many readers there are; each
reader has a small bounded buffer of those serialised lines. A reader that does not keep up
loses its oldest lines (it is told how many, as a Gap), so no reader can slow the job or
make the daemon hold more than `buffer` lines per reader.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace

import anyio

from state.async_store import AsyncStore
from state.store import Store
from supervisor.contract import status as c
from supervisor.control.audit_events import event_of

log = logging.getLogger("supervisor.control")

EVENT_POLL_S = 0.2
FAREWELL_S = 2.0        # the last snapshot at shutdown gets this long (a broken store: none)
RECENT_EVENTS = 50
REPLAY_PAGE = 500
REPLAY_LIMIT = 20_000
THROUGHPUT_POINTS = 120
THROUGHPUT_EVERY_S = 5.0


class Subscriber:
    def __init__(self, size: int) -> None:
        self.size = size
        self._items: deque[tuple[int | None, str]] = deque()
        self.dropped = 0
        self.closed = False
        self._wake = anyio.Event()

    def put(self, event_id: int | None, line: str) -> None:
        if len(self._items) >= self.size:
            self._items.popleft()
            self.dropped += 1
        self._items.append((event_id, line))
        self._wake.set()

    def close(self) -> None:
        self.closed = True
        self._wake.set()

    async def next_batch(self) -> list[tuple[int | None, str]]:
        """What arrived since the last call (a Gap line first if some was dropped); empty
        once the hub is closed."""
        while not self._items and not self.closed:
            await self._wake.wait()
            self._wake = anyio.Event()
        batch = list(self._items)
        self._items.clear()
        if self.dropped:
            batch.insert(0, (None, c.stream_line(c.Gap(self.dropped))))
            self.dropped = 0
        return batch


# The job's snapshot, built on demand; the hub adds what only it keeps (throughput history,
# recent events).
StatusSource = Callable[[], Awaitable[c.Status]]


class Hub:
    def __init__(self, astore: AsyncStore, build: StatusSource, interval_s: float,
                 buffer: int = 64, clock: Callable[[], float] = time.time,
                 on_event: Callable[[c.Event], None] | None = None) -> None:
        self.astore = astore
        self._build = build
        self.interval_s = interval_s
        self.buffer = buffer
        self.clock = clock
        self.on_event = on_event
        self._subscribers: set[Subscriber] = set()
        self.events: deque[c.Event] = deque(maxlen=RECENT_EVENTS)
        self.last_event_id = 0
        self._throughput: deque[c.ThroughputPoint] = deque(maxlen=THROUGHPUT_POINTS)
        self._cached: tuple[float, c.Status] | None = None
        self._cached_json: tuple[c.Status, bytes] | None = None
        self._building = anyio.Lock()
        self._refreshing = False        # run() builds a snapshot every interval
        self.closed = False

    # -- readers ------------------------------------------------------------------------------

    def subscribe(self) -> Subscriber:
        sub = Subscriber(self.buffer)
        if self.closed:
            sub.close()
        self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self._subscribers.discard(sub)

    async def status(self, max_age_s: float = 0.2) -> c.Status:
        """A snapshot at most `max_age_s` old, or the last one while a new one is being
        built: a crowd of pollers shares one build, and none waits behind the store's queue
        (a build's counts wait their turn among the dispatcher's claims and commits, which
        can take a second on a busy job) unless an action just changed what it shows.
        While `run` refreshes the snapshot every interval, a poller takes the last one up
        to an interval (+ `max_age_s`) old: a status call then costs the daemon the same
        on a saturated 900K job as on an idle 3K one, and the TUI's 1 Hz poll never waits
        for the store (`benchmarks/bench_seed_scale.py`)."""
        cached = self._cached
        if cached is not None:
            age = time.monotonic() - cached[0]
            fresh_enough = max_age_s + (self.interval_s if self._refreshing else 0.0)
            if age <= fresh_enough or self._building.locked():
                return cached[1]
        async with self._building:
            cached = self._cached
            if cached is not None and time.monotonic() - cached[0] <= max_age_s:
                return cached[1]        # built while we waited for the lock
            status = replace(await self._build(), throughput=tuple(self._throughput),
                             recent_events=tuple(self.events))
            self._cached = (time.monotonic(), status)
            return status

    async def status_json(self, max_age_s: float = 0.2) -> bytes:
        """The same snapshot serialised, once per snapshot however many ask for it."""
        status = await self.status(max_age_s)
        cached = self._cached_json
        if cached is None or cached[0] is not status:
            cached = self._cached_json = (status, status.to_json().encode())
        return cached[1]

    def invalidate(self) -> None:
        """An action changed something: the next status is built fresh."""
        self._cached = None

    async def replay(self, since: int, upto: int | None = None) -> list[c.Event]:
        """Events with an id above `since` (and at most `upto`) from the DB, oldest first;
        at most REPLAY_LIMIT of them (a reader further behind asks again from the last)."""
        out: list[c.Event] = []
        after = since
        while (upto is None or after < upto) and len(out) < REPLAY_LIMIT:
            page = await self.astore.call(Store.events_after, after, REPLAY_PAGE)
            for e in page:
                if upto is not None and e.id > upto:
                    return out
                out.append(event_of(e))
            if len(page) < REPLAY_PAGE:
                break
            after = page[-1].id
        return out

    # -- the publisher ------------------------------------------------------------------------

    async def prime(self) -> None:
        recent = await self.astore.call(Store.recent_events, RECENT_EVENTS)
        for e in recent:
            self.events.append(event_of(e))
        self.last_event_id = recent[-1].id if recent else 0

    async def run(self) -> None:
        """Until cancelled: new events every EVENT_POLL_S, a snapshot every interval (built
        whether or not a stream reads it: the pollers take it too)."""
        next_status = next_point = time.monotonic()
        try:
            self._refreshing = True
            while True:
                await self._poll_events()
                now = time.monotonic()
                status: c.Status | None = None
                if now >= next_point:
                    next_point = now + THROUGHPUT_EVERY_S
                    status = await self.status(max_age_s=0.0)
                    self._throughput.append(c.ThroughputPoint(
                        status.time, status.rates.req_per_s, status.rates.tok_per_s))
                if now >= next_status:
                    next_status = now + self.interval_s
                    status = status or await self.status(max_age_s=0.0)
                    if self._subscribers:
                        self._publish(None, c.stream_line(status))
                await anyio.sleep(min(EVENT_POLL_S, max(0.0, next_status - time.monotonic())))
        finally:
            self._refreshing = False
            self.close()

    async def _poll_events(self) -> None:
        while True:
            page = await self.astore.call(Store.events_after, self.last_event_id, REPLAY_PAGE)
            for e in page:
                event = event_of(e)
                if self.on_event is not None:
                    self.on_event(event)
                self.events.append(event)
                self.last_event_id = e.id
                self._publish(e.id, c.stream_line(event))
            if len(page) < REPLAY_PAGE:
                return

    async def farewell(self) -> None:
        """The daemon is going: the events since the last poll and one fresh snapshot to
        every reader, so one that watched this node to its end (the TUI's fleet screen)
        sees how it ended -- its partition done, or work left -- not a snapshot up to an
        interval old. Call before close(), shielded."""
        if not self._subscribers:
            return
        with anyio.move_on_after(FAREWELL_S):
            try:
                await self._poll_events()
                self._publish(None, c.stream_line(await self.status(max_age_s=0.0)))
            except Exception as exc:       # the store may be what stopped the daemon
                log.debug("no last snapshot for the readers: %s: %s", type(exc).__name__, exc)

    def _publish(self, event_id: int | None, line: str) -> None:
        for sub in self._subscribers:
            sub.put(event_id, line)

    def close(self) -> None:
        self.closed = True
        for sub in list(self._subscribers):
            sub.close()
