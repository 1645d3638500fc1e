"""Each action over the socket changes the running job and leaves an audit row naming the
caller as the kernel saw it (uid, pid); the event stream carries it all in order."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.client.control_client import ControlRefused
from supervisor.contract import status as c
from supervisor.contract.actions import ResetResult
from tests.fixtures import control_daemon as daemon

pytestmark = pytest.mark.slow


@pytest.fixture
def d(tmp_path: Path) -> Iterator[daemon.Daemon]:
    running = daemon.start(tmp_path / "job", max_failures=2, failure_window_s=300.0)
    yield running
    assert running.stop() == 0, running.log()[-3000:]


def audit_rows(d: daemon.Daemon, action: str) -> list[tuple[str, dict]]:
    return [(actor, json.loads(detail)) for actor, detail in d.query(
        "SELECT actor, detail FROM events WHERE kind = 'control_action' AND subject = ? "
        "ORDER BY id", action)]


def assert_audited(d: daemon.Daemon, action: str) -> dict:
    rows = audit_rows(d, action)
    assert len(rows) == 1, rows
    actor, detail = rows[0]
    caller = detail["caller"]
    # This process asked: the kernel's credentials, not anything the client claimed.
    assert caller["uid"] == os.getuid() and caller["pid"] == os.getpid()
    assert actor == f"{caller['user']} (uid {os.getuid()}, pid {os.getpid()})"
    return detail


def test_max_tokens_with_requeue_of_truncated(d: daemon.Daemon) -> None:
    # Everything the simulator writes is longer than 256 tokens: answers are truncated.
    d.wait_status(lambda s: s.quality.truncated_total >= 5, "some truncated answers")
    with d.client() as client:
        result = client.set_max_tokens(512, requeue_truncated=True)
        status = client.status()
    assert (result.old, result.new) == (256, 512) and result.requeued and result.requeued >= 5
    assert status.max_tokens == 512 and status.output_lengths.max_tokens == 512
    assert d.query("SELECT count(*) FROM prompts WHERE status = 'done' AND "
                   "finish_reason = 'length' AND max_tokens < 512")[0][0] <= status.job.in_flight
    detail = assert_audited(d, "max-tokens")
    assert detail["request"] == {"value": 512, "requeue_truncated": True,
                                 "continue_truncated": False, "include_loops": False,
                                 "requeue_at_most": None}
    assert detail["result"]["requeued"] == result.requeued
    # New requests carry the new limit.
    d.wait_status(lambda s: any(n > 300 for n in _lengths(d)), "answers at the new limit")


def test_the_max_tokens_dialog_count_is_the_count_requeued(d: daemon.Daemon) -> None:
    """The `m` dialog's figure (a snapshot's job.truncated) is what is requeued and evented,
    though answers keep being cut off while the operator reads it."""
    with d.client() as client:
        shown = client.status().job.truncated
        assert shown is not None
        d.wait_status(lambda s: (s.job.truncated or 0) > shown, "more truncated since")
        result = client.set_max_tokens(512, requeue_truncated=True, requeue_at_most=shown)
    assert result.requeued == shown
    [(detail,)] = d.query("SELECT detail FROM events WHERE kind = 'requeue_truncated' "
                          "ORDER BY id DESC LIMIT 1")
    assert json.loads(detail)["count"] == shown == json.loads(detail)["shown"]


def _lengths(d: daemon.Daemon) -> list[int]:
    return [r[0] for r in d.query("SELECT completion_tokens FROM prompts WHERE max_tokens = 512 "
                                  "AND status = 'done' LIMIT 20")]


def test_requeue_truncated_counts_what_it_requeued(d: daemon.Daemon) -> None:
    d.wait_status(lambda s: s.quality.truncated_total >= 3, "some truncated answers")
    with d.client() as client:
        client.set_max_tokens(300)
        truncated = d.query("SELECT count(*) FROM prompts WHERE status = 'done' AND "
                            "finish_reason = 'length' AND max_tokens < 300")[0][0]
        result = client.requeue_truncated()
    assert result.what == "truncated" and result.below_max_tokens == 300
    assert truncated <= result.count <= truncated + 20   # + those finishing meanwhile
    audited = assert_audited(d, "requeue-truncated")
    assert audited["result"]["count"] == result.count
    assert audited["request"] == {"include_loops": False} and result.loops_left is not None


def test_requeue_truncated_with_loops_says_so_in_the_event(d: daemon.Daemon) -> None:
    with d.client() as client:
        result = client.requeue_truncated(include_loops=True)
    assert result.loops_left == 0                  # nothing truncated is left behind
    assert assert_audited(d, "requeue-truncated")["request"] == {"include_loops": True}
    [(detail,)] = d.query("SELECT detail FROM events WHERE kind = 'requeue_truncated' "
                          "ORDER BY id DESC LIMIT 1")
    assert json.loads(detail)["include_loops"] is True


def test_pause_stops_dispatch_and_resume_restarts_it(d: daemon.Daemon) -> None:
    with d.client() as client:
        result = client.pause("checking shard 3")
        assert result.changed and result.paused == (c.PauseReason("operator", "checking shard 3"),)
        s = d.wait_status(lambda s: s.job.in_flight == 0, "in-flight requests to finish")
        assert s.paused_by("operator") == "checking shard 3"
        time.sleep(1.0)
        assert client.status().job.done == s.job.done       # nothing new was sent
        again = client.pause("checking shard 3")
        assert not again.changed
        resumed = client.resume()
        assert resumed.lifted == (c.PauseReason("operator", "checking shard 3"),)
        assert resumed.paused == ()
    d.wait_status(lambda x: x.job.done > s.job.done, "dispatch to go on")
    assert len(audit_rows(d, "pause")) == 2
    assert_audited(d, "resume")
    # The pause survives a daemon restart until resumed: it is in the DB.
    assert d.query("SELECT value FROM settings WHERE key = 'operator_pause'") == [("",)]


def test_events_stream_sees_a_restart_and_a_max_tokens_change_in_order(d: daemon.Daemon) -> None:
    seen: list[c.StreamItem] = []
    stop = threading.Event()

    def read() -> None:
        with d.client() as client:
            for item in client.events(since=0):
                seen.append(item)
                if stop.is_set():
                    return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    with d.client() as client:
        answer = client.restart("gpu1")
        assert answer.order == ("gpu1",)
        d.wait_status(lambda s: s.servers[1].restarts == 1
                      and s.servers[1].state is c.ServerState.READY, "gpu1 back READY", 60)
        client.set_max_tokens(384)
        with pytest.raises(ControlRefused, match="still running|not FAILED"):
            client.reset("gpu1")
    deadline = time.monotonic() + 10
    while not any(isinstance(i, c.Event) and i.kind == "max_tokens" for i in seen):
        assert time.monotonic() < deadline, "no max_tokens event on the stream"
        time.sleep(0.05)
    stop.set()
    reader.join(timeout=10)
    events = [i for i in seen if isinstance(i, c.Event)]
    ids = [e.id for e in events]
    assert ids == sorted(ids) and len(ids) == len(set(ids)) and ids[0] == 1   # replayed from 1
    steps = [(e.kind, e.subject, e.detail().get("to")) for e in events]
    restart = steps.index(("control_action", "restart", None))
    gpu1 = [s[2] for s in steps[restart:] if s[:2] == ("server_state", "gpu1")]
    assert gpu1[:2] == ["DRAINING", "STOPPING"] and "READY" in gpu1, gpu1
    ready_at = restart + next(i for i, s in enumerate(steps[restart:])
                              if s == ("server_state", "gpu1", "READY"))
    assert next(i for i, s in enumerate(steps) if s[0] == "max_tokens") > ready_at
    assert any(isinstance(i, c.Status) and i.max_tokens == 384 for i in seen)
    caller = next(e.caller for e in events if e.kind == "control_action")
    assert caller is not None and caller.pid == os.getpid()


def test_retune_one_server_then_reset_it_when_failed(d: daemon.Daemon) -> None:
    with d.client() as client:
        with pytest.raises(ControlRefused, match="unknown flag 'sim-fault'"):
            client.retune({"sim-fault": "crash"}, server="gpu1")
        # A flag that makes gpu1 crash right after start: it comes back, crashes, and after
        # max_failures is FAILED; the roll stops there and gpu0 is never touched.
        answer = client.retune({"sim-fault": "crash", "sim-fault-after-requests": 1},
                               server="gpu1", add=True)
        assert answer.order == ("gpu1",)
        assert [(ch.name, ch.old, ch.new) for ch in answer.changes] == [
            ("sim-fault", None, "crash"), ("sim-fault-after-requests", None, 1)]
        s = d.wait_status(lambda s: s.servers[1].state is c.ServerState.FAILED,
                          "gpu1 FAILED", 60)
        flags = {f.name: f.value for f in s.servers[1].flags}
        assert flags["sim-fault"] == "crash" and "sim-fault" not in {
            f.name for f in s.servers[0].flags}
        assert s.servers[0].restarts == 0
        assert "--sim-fault" in s.servers[1].argv
        # The start right after FAILED is the operator's (gpu1 crashes again later, and
        # the supervisor's own restarts follow).
        failed_at = d.query("SELECT max(id) FROM events WHERE kind = 'server_state' AND "
                            "subject = 'gpu1' AND json_extract(detail, '$.to') = 'FAILED'")[0][0]
        reset = client.reset("gpu1")
        assert reset == ResetResult("gpu1", c.ServerState.FAILED)
    deadline = time.monotonic() + 10
    while not d.query("SELECT 1 FROM events WHERE kind = 'server_state' AND subject = 'gpu1' "
                      "AND json_extract(detail, '$.to') = 'STARTING' AND id > ?", failed_at):
        assert time.monotonic() < deadline, "no start after the reset"
        time.sleep(0.05)
    starts = d.query("SELECT actor FROM events WHERE kind = 'server_state' AND subject = 'gpu1' "
                     "AND json_extract(detail, '$.to') = 'STARTING' AND id > ? ORDER BY id "
                     "LIMIT 1", failed_at)
    assert starts[0][0].endswith(f"pid {os.getpid()})")
    assert_audited(d, "retune")
    assert_audited(d, "reset")
