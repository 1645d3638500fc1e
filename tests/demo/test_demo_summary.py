"""The demo's closing lines: one short line per server that failed, counted as audit_restarts
counts, and resume advice only where there is something left to resume."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from state.records import Event
from supervisor.contract.event_kinds import EventKind
from supervisor.demo.summary import failures_by_server, summary_lines
from tests.fixtures.job_status import job_status

CAUSE = ("crash: killed by signal 9 (SIGKILL) after: Scheduler hit an exception: "
         "SimulatedCrash: CUDA error: an illegal memory access was encountered")


def state_event(i: int, at: float, server: str, to: str, reason: str) -> Event:
    return Event(i, at, EventKind.SERVER_STATE, server,
                 {"from": "STOPPING", "to": to, "reason": reason}, "supervisor")


@dataclass
class Result:
    status: object
    reason: str


def test_each_failed_server_is_said_once_with_its_counts() -> None:
    """Four restarts and a FAILED: five failures, its cause once, the policy's words apart."""
    events = [state_event(1, 5.0, "gpu0", "BACKOFF", "crash: an earlier run; restarting in 1 s")]
    events += [state_event(i, 10.0 + i, "gpu0", "BACKOFF", f"{CAUSE}; restarting in 0.5 s")
               for i in range(2, 6)]
    events.append(state_event(6, 20.0, "gpu0", "FAILED",
                              f"{CAUSE}; 12 failures within 120 s, waiting for an operator"))
    events.append(state_event(7, 21.0, "gpu1", "STARTING", "restart after crash"))
    [f] = failures_by_server(events, since=10.0)
    assert (f.name, f.failures, f.cause) == ("gpu0", 5, CAUSE)
    assert f.gave_up == "12 failures within 120 s"


def test_the_summary_says_each_cause_once_and_no_resume_after_a_finished_job(
        tmp_path: Path) -> None:
    """A finished job gets no resume advice; an unfinished one does; a shared cause is said once."""
    events = [state_event(i, 10.0 + i, f"gpu{i % 3}", "FAILED" if i >= 12 else "BACKOFF",
                          f"{CAUSE}; " + ("6 failures within 120 s, answering 40"
                                          " between them, waiting for an operator" if i >= 12
                                          else "restarting in 1 s"))
              for i in range(15)]
    failures = failures_by_server(events, since=0.0)
    left = job_status(tmp_path, done=1000, pending=2000)
    reason = "every server FAILED: " + "; ".join(f"gpu{i}: {CAUSE}" for i in range(3))
    text = "\n".join(summary_lines(Result(left, reason), "/d/shards", 60.0, failures, None))
    assert text.count("SimulatedCrash") == 1          # one cause, said once for the three
    assert text.splitlines()[0].startswith("demo every server FAILED in 60 s: 1000/3000")
    assert "server failures this run: 15" in text
    assert "failed 5 times, restarted 4 times, then FAILED" in text
    assert "run the same command again to resume" in text
    assert max(len(line) for line in text.splitlines()) < 160
    done = replace(left, done=3000, pending=0)
    text = "\n".join(summary_lines(Result(done, "finished"), "/d/shards", 60.0, [], None))
    assert "resume" not in text and "demo finished in 60 s" in text
