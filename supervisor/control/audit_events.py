"""The events table's rows as the contract's Events: what the hub streams and replays."""

from __future__ import annotations

import json

from state.records import Event as StoreEvent
from supervisor.contract import status as c


def event_of(e: StoreEvent) -> c.Event:
    caller = None
    raw = e.detail.get("caller") if isinstance(e.detail, dict) else None
    if isinstance(raw, dict):
        try:
            caller = c.Caller.from_plain(raw)
        except c.ContractError:
            caller = None
    return c.Event(id=e.id, time=e.time, kind=e.kind, subject=e.subject, actor=e.actor,
                   detail_json=json.dumps(e.detail, ensure_ascii=False, default=str),
                   caller=caller)
