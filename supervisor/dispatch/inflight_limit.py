"""One server's live in-flight limit, as the dispatcher's workers honour it.

A READY life starts with `max_running` workers and the limit at `max_running`; the
saturation guard (servers/saturation_guard.py) may lower it and raise it back while the
server runs. Each worker holds a slot for as long as its request is on the wire, so a
lowered limit never cancels a request in flight: the workers beyond it finish what they
sent and then wait for a slot before they send the next one.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import anyio


class InFlightLimit:
    def __init__(self, max_running: int) -> None:
        if max_running < 1:
            raise ValueError(f"in-flight limit: max_running must be at least 1, "
                             f"got {max_running}")
        self.max = max_running
        self.reason: str | None = None      # why it is below the max, while it is
        # anyio's limiter keeps its borrowers when its total is lowered: exactly "finish
        # what you hold, then wait".
        self._slots = anyio.CapacityLimiter(max_running)

    @property
    def limit(self) -> int:
        return int(self._slots.total_tokens)

    @property
    def lowered(self) -> bool:
        return self.limit < self.max

    def set(self, value: int, reason: str | None = None) -> int:
        """Set the limit (clamped to 1..max); returns the limit now in force."""
        value = max(1, min(self.max, int(value)))
        self._slots.total_tokens = value
        self.reason = reason if value < self.max else None
        return value

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Held while one request is on the wire."""
        async with self._slots:
            yield
