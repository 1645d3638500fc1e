"""The event stream under readers that misbehave: one that never reads loses old items (it
is told how many) and costs the job nothing; `since` replays exactly what was missed."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.contract import status as c
from tests.fixtures import control_daemon as daemon

pytestmark = pytest.mark.slow


@pytest.fixture
def d(tmp_path: Path) -> Iterator[daemon.Daemon]:
    # Snapshots 20 times a second: a reader that never reads falls behind within seconds.
    running = daemon.start(tmp_path / "job", control={"interval_s": 0.05})
    yield running
    assert running.stop() == 0, running.log()[-3000:]


def test_a_reader_that_never_reads_loses_old_items_not_the_job(d: daemon.Daemon) -> None:
    stuck = []
    for _ in range(5):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(d.socket)
        s.sendall(b"GET /v1/events HTTP/1.1\r\nhost: x\r\n\r\n")
        stuck.append(s)
    try:
        with d.client() as client:
            before = client.status()
            # Long enough for the socket buffers and then each reader's buffer to fill.
            after = d.wait_status(lambda s: s.time - before.time > 8.0, "time to pass", 30)
            assert after.job.done > before.job.done and not after.paused
            assert client.pause("stream test").changed
        # The stuck reader now reads: a Gap says what it lost, then it is live again.
        reader = stuck[0]
        reader.settimeout(10)
        data = b""
        deadline = time.monotonic() + 20
        while b'"type":"gap"' not in data or b"stream test" not in data.split(b'"type":"gap"')[-1]:
            assert time.monotonic() < deadline, data[-500:]
            data += reader.recv(1 << 20)
        gap = data.split(b'"type":"gap","data":{"dropped":')[1].split(b"}")[0]
        assert int(gap) > 0
    finally:
        for s in stuck:
            s.close()


def test_since_replays_what_a_reconnecting_reader_missed(d: daemon.Daemon) -> None:
    with d.client() as client:
        first = next(i for i in client.events(since=0) if isinstance(i, c.Status))
        last_seen = max(e.id for e in first.recent_events)
        client.pause("one")
        client.pause("two")
        client.resume()
        items = []
        for item in client.events(since=last_seen):
            items.append(item)
            if isinstance(item, c.Status):
                break                   # the replay comes before the first snapshot
    events = [i for i in items if isinstance(i, c.Event)]
    db_ids = [r[0] for r in d.query("SELECT id FROM events WHERE id > ? AND id <= ? ORDER BY id",
                                    last_seen, events[-1].id)]
    assert [e.id for e in events] == db_ids
    reasons = [e.detail()["request"].get("reason") for e in events
               if e.kind == "control_action" and e.subject == "pause"]
    assert reasons == ["one", "two"]
