"""Audit event kinds are named once (supervisor/contract/event_kinds.py): nothing writes an
event with its kind spelled out as a string, and what the TUI, /metrics and the SQL views
match on is a member of that list."""

from __future__ import annotations

import re
from pathlib import Path

from state.store import Store
from supervisor.contract.event_kinds import EventKind
from tests.fixtures.state_db import read_db

ROOT = Path(__file__).resolve().parents[2]
# Store.add_event("kind", ...), astore.call(Store.add_event, "kind", ...), and the store's own
# INSERT INTO events ... VALUES (?, 'kind', ...).
WRITTEN_AS_TEXT = re.compile(r"""add_event\s*[(,]\s*['"]|_event\(\s*['"]|VALUES \(\?, '""")


def _lines(*folders: str) -> list[tuple[str, str]]:
    return [(f"{p.relative_to(ROOT)}:{n}", line) for folder in folders
            for p in sorted((ROOT / folder).rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1)]


def test_no_event_is_written_with_its_kind_spelled_out() -> None:
    offenders = [where for where, line in _lines("supervisor", "state")
                 if WRITTEN_AS_TEXT.search(line)]
    assert offenders == []


def test_the_pattern_catches_each_way_of_writing_one() -> None:
    for line in ('store.add_event("job_started", "job", {})',
                 "await astore.call(Store.add_event, 'paused', key, d, actor, now)",
                 'self._event("paused", "quality", d, actor)',
                 """"VALUES (?, 'requeue_failed', 'prompts', ?, ?)","""):
        assert WRITTEN_AS_TEXT.search(line), line
    assert not WRITTEN_AS_TEXT.search("store.add_event(EventKind.JOB_STARTED, 'job', {})")


def test_what_the_tui_matches_on_is_a_kind() -> None:
    # tui/event_text.py and tui/alerts.py compare event.kind with members only.
    for where, line in _lines("tui"):
        assert not re.search(r"""kind\s*[!=]=\s*['"]""", line), where


def test_the_restarts_view_counts_server_state_events(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "job.db")
    try:
        store.add_event(EventKind.SERVER_STATE, "gpu0",
                        {"from": "READY", "to": "BACKOFF", "exit_kind": "oom"}, "supervisor")
        store.add_event(EventKind.SERVER_RETUNE, "gpu0", {"to": "BACKOFF"}, "supervisor")
    finally:
        store.close()
    rows = read_db(tmp_path / "job.db", "SELECT server, cause, restarts FROM audit_restarts")
    assert [tuple(r) for r in rows] == [("gpu0", "oom", 1)]
    assert len({k.value for k in EventKind}) == len(EventKind)
