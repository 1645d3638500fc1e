"""Stalled requests per server: when enough of them pile up, the server is hung.

Only stalls of a silent server count here: a request with no token for dispatch.stall_s
while the server made no token for anyone (stream_deadlines.py `server_silent`). A request
silent while its server streams for others is waiting (queued by KV budget, retracted),
never a sign of a hang: counting those restarted busy servers and threw their work away.

One stalled request can be the request's own bad luck, and it is simply aborted and
retried. Several on one server within a few minutes, while its
health checks still pass, is the server: a scheduler stuck on a batch stalls every request
in it. The fleet's progress watcher (servers/watchers.py watch_progress) then restarts it.
The plain progress watch cannot see this by itself: each stall ends its request (as a
retry), so the server's completed count keeps moving.
"""

from __future__ import annotations

from collections import deque

# The defaults of dispatch.stall_hang_count / stall_hang_window_s.
# Three stalls: one or two can be pathological prompts (a huge prefill behind a stuck
# request); three distinct requests stuck on one server within five minutes is the server.
# Five minutes: longer than one stall (stall_s, 2 min by default) so requests stuck in the
# same batch count together, short enough that stalls a day apart never add up.
HANG_STALLS = 3
HANG_WINDOW_S = 300.0


class StallWindow:
    def __init__(self, stalls: int = HANG_STALLS, window_s: float = HANG_WINDOW_S) -> None:
        if stalls < 0 or window_s <= 0:
            raise ValueError(f"stalls must be >= 0 (0: never) and window_s > 0, got {stalls}, "
                             f"{window_s}")
        self.stalls = stalls
        self.window_s = window_s
        self._at: dict[str, deque[float]] = {}

    def stalled(self, server: str, now: float) -> str | None:
        """Count one stall; the hang reason once the server has had enough of them."""
        times = self._at.setdefault(server, deque())
        times.append(now)
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if self.stalls and len(times) >= self.stalls:
            return f"hang: {len(times)} requests stalled within {self.window_s:g} s"
        return None

    def count(self, server: str) -> int:
        return len(self._at.get(server, ()))

    def reset(self, server: str) -> None:
        """A new life of the server starts with a clean slate."""
        self._at.pop(server, None)
