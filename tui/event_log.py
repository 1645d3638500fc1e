"""The events a screen shows: merged by id from the snapshots' recent events and the event
stream (the same event arrives by both), oldest first, the latest KEEP_EVENTS kept. One log
per daemon, for the single-node app and for each node of the fleet app alike."""

from __future__ import annotations

from supervisor.contract.status import Event

KEEP_EVENTS = 200


class EventLog:
    def __init__(self, keep: int = KEEP_EVENTS) -> None:
        self.keep = keep
        self._by_id: dict[int, Event] = {}

    def merge(self, events: tuple[Event, ...]) -> bool:
        """Adds the events not seen yet; True when there were any."""
        fresh = [e for e in events if e.id not in self._by_id]
        for e in fresh:
            self._by_id[e.id] = e
        if len(self._by_id) > self.keep:
            for old in sorted(self._by_id)[:-self.keep]:
                del self._by_id[old]
        return bool(fresh)

    def ordered(self) -> tuple[Event, ...]:
        return tuple(self._by_id[i] for i in sorted(self._by_id))
