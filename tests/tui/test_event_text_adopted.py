"""The TUI's event line for a server adopted from an earlier daemon, and for one refused."""

from __future__ import annotations

import json

from supervisor.contract.event_kinds import EventKind
from supervisor.contract.status import Event
from tui.event_text import describe


def _event(kind: str, detail: dict[str, object]) -> Event:
    return Event(id=1, time=0.0, kind=kind, subject="gpu3", actor="supervisor",
                 detail_json=json.dumps(detail))


def test_adopted_says_pid_uptime_and_what_it_aborted() -> None:
    e = _event(EventKind.SERVER_ADOPTED, {"pid": 4242, "up_s": 11520.0, "aborted": 37,
                                          "left_in_flight": 37, "roll": False})
    assert describe(e) == ("gpu3: adopted pid 4242, up 3h12m, left running by an earlier daemon; "
                           "37 answers it left in flight aborted")
    e = _event(EventKind.SERVER_ADOPTED, {"pid": 7, "up_s": 42, "roll": True})
    assert describe(e) == ("gpu3: adopted pid 7, up 42s, left running by an earlier daemon; "
                           "flags differ: rolling restart")


def test_refused_names_the_failed_proof() -> None:
    e = _event(EventKind.ADOPTION_REFUSED, {"pid": 9, "why": "its DFLASH_JOB_TOKEN is not "
                                                             "this job's"})
    assert describe(e) == "gpu3: not adopting pid 9: its DFLASH_JOB_TOKEN is not this job's"


def test_a_unit_restarted_by_hand_says_so() -> None:
    e = _event(EventKind.SERVER_ADOPTED, {"pid": 77, "up_s": 3, "aborted": 0, "roll": False,
                                          "why": "started outside the daemon (its unit was "
                                                 "restarted, e.g. by systemctl restart)"})
    assert describe(e) == ("gpu3: adopted pid 77, up 3s, started outside the daemon (its unit "
                           "was restarted, e.g. by systemctl restart)")
