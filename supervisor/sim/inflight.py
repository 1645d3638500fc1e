"""Requests in flight by request id, for /abort_request.

SGLang 0.5.23 (`sglang/srt/managers/tokenizer_manager.py` abort_request, and the scheduler's
abort_request in `sglang/srt/managers/scheduler.py`):
- a request id must be unique among those in flight ("Duplicate request ID detected: <rid>",
  a 400);
- `{"rid": R}` is ignored unless R is in flight (with one tokenizer worker); the scheduler then
  aborts every request whose id *starts with* R; `{"abort_all": true}` aborts everything;
  an empty rid without abort_all is ignored;
- an aborted request still answers, with finish_reason "abort" and what it produced.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio


@dataclass
class Flight:
    rid: str
    aborted: anyio.Event = field(default_factory=anyio.Event)
    # Also told of an abort (a stream wakes on one event for an abort or a retraction).
    on_abort: Callable[[], None] | None = None


ABORTED_KEPT = 1000      # the newest aborted rids /sim/state lists (for tests)


class InFlight:
    def __init__(self) -> None:
        self._by_rid: dict[str, Flight] = {}
        # Not in SGLang: the request ids /abort_request stopped, newest last, so a test can
        # see that a client aborted exactly the request it meant.
        self.aborted: deque[str] = deque(maxlen=ABORTED_KEPT)

    @contextmanager
    def track(self, rid: str) -> Iterator[Flight]:
        if rid in self._by_rid:
            raise ValueError(f"Duplicate request ID detected: {rid}")
        flight = self._by_rid[rid] = Flight(rid)
        try:
            yield flight
        finally:
            del self._by_rid[rid]

    def __contains__(self, rid: object) -> bool:
        return rid in self._by_rid

    def abort(self, rid: str, abort_all: bool) -> int:
        """How many requests were told to stop."""
        if not abort_all and (not rid or rid not in self._by_rid):
            return 0
        hit = [f for f in self._by_rid.values() if abort_all or f.rid.startswith(rid)]
        for f in hit:
            if not f.aborted.is_set():
                self.aborted.append(f.rid)
            f.aborted.set()
            if f.on_abort is not None:
                f.on_abort()
        return len(hit)
