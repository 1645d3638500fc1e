"""The `events` table: the audit trail of what happened and who did it."""

from __future__ import annotations

import json
import time
from typing import Any

from state.connection import StoreConnection, dumps
from state.records import Event
from supervisor.contract.event_kinds import EventKind


class EventsTable(StoreConnection):
    """Append and read events."""

    def add_event(self, kind: EventKind, subject: str, detail: dict[str, Any], actor: str,
                  now: float | None = None) -> int:
        with self._tx() as conn:
            cur = conn.execute(
                "INSERT INTO events (time, kind, subject, detail, actor) VALUES (?, ?, ?, ?, ?)",
                (time.time() if now is None else now, kind, subject, dumps(detail), actor))
            return int(cur.lastrowid or 0)

    def recent_events(self, limit: int, kind: str | None = None) -> list[Event]:
        """The `limit` latest events (of one kind, if given), oldest first."""
        if kind is None:
            rows = self._read("SELECT id, time, kind, subject, detail, actor FROM events "
                              "ORDER BY id DESC LIMIT ?", (limit,))
        else:
            rows = self._read("SELECT id, time, kind, subject, detail, actor FROM events "
                              "WHERE kind = ? ORDER BY id DESC LIMIT ?", (kind, limit))
        return [Event(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in reversed(rows)]

    def events_after(self, after_id: int, limit: int) -> list[Event]:
        """Up to `limit` events with an id above `after_id`, oldest first (a primary-key
        range: cheap however long the table grows)."""
        rows = self._read("SELECT id, time, kind, subject, detail, actor FROM events "
                          "WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit))
        return [Event(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]
