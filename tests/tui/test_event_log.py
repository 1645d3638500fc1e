"""One event log for both apps: an event that arrives in a snapshot and on the stream shows
once, oldest first, and only the latest `keep` stay."""

from __future__ import annotations

from supervisor.contract.event_kinds import EventKind
from supervisor.contract.status import Event
from tui.event_log import EventLog


def event(i: int) -> Event:
    return Event(id=i, time=float(i), kind=EventKind.PAUSED, subject="operator",
                 actor="user:alice", detail_json='{"reason": "look"}')


def test_the_same_event_from_a_snapshot_and_the_stream_shows_once() -> None:
    log = EventLog(keep=5)
    assert log.merge((event(2), event(1)))        # a snapshot's recent events
    assert not log.merge((event(2),))             # then the same one on the stream
    assert log.merge((event(3),))
    assert [e.id for e in log.ordered()] == [1, 2, 3]


def test_only_the_latest_stay() -> None:
    log = EventLog(keep=3)
    log.merge(tuple(event(i) for i in range(10, 0, -1)))
    assert [e.id for e in log.ordered()] == [8, 9, 10]
    log.merge((event(2),))                        # older than what is kept: dropped
    assert [e.id for e in log.ordered()] == [8, 9, 10]
