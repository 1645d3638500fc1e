"""The circuit breaker: when most recent requests fail, stop sending until an operator looks.

One bad setting (a chat-template error, a `job.model` SGLang reads as a LoRA adapter, a
server answering 500 to everything) fails every request within milliseconds. Retried at
full speed that burns every prompt's attempts and marks the whole job failed in minutes.
The breaker watches the share of failed requests over the last `window` answers; past the
threshold (once `min_samples` are in) it opens, the dispatcher pauses under the key
"breaker", and it stays open until an operator resumes (which also clears the window).

Only answers count: a request cut off because its server died goes back to pending
(the fleet restarts the server) and says nothing about the requests. The reason names the
failing servers when others in the window answer fine: one broken server whose requests
fail in milliseconds can fill the window alone, and the fix is then to restart it, not to
change the config.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

SAMPLE_CHARS = 300     # of the sample error message in the pause reason (the event keeps more)
FEW_SERVERS = 3        # errors from this many servers or fewer are named in the reason


@dataclass(frozen=True)
class BreakerSnapshot:
    samples: int                     # answers in the window
    error_rate: float                # share of them that were errors
    errors_by_kind: dict[str, int]   # errors in the window, per kind ("HTTP 400", "timeout")
    requests_total: int              # answers since the daemon started
    errors_total: int
    tripped: str | None              # why dispatch is paused, while the breaker is open
    last_error: str | None = None    # the newest error message in the window
    # The kind and a message of the error that opened the breaker (for the event and alerts).
    tripped_kind: str | None = None
    tripped_sample: str | None = None
    errors_by_server: dict[str, int] = field(default_factory=dict)   # in the window


@dataclass(frozen=True)
class Trip:
    """Why the breaker opened: the pause reason, the commonest error's kind and one whole
    message of it, and the window's errors by kind and by server at that moment."""
    reason: str
    kind: str
    sample: str
    counts: dict[str, int] = field(default_factory=dict)
    servers: dict[str, int] = field(default_factory=dict)


class ErrorBreaker:
    def __init__(self, window: int, min_samples: int, max_error_rate: float) -> None:
        self.window = window
        self.min_samples = min_samples
        self.max_error_rate = max_error_rate
        # (the error's kind or None for an answer, the server)
        self._recent: deque[tuple[str | None, str]] = deque()
        self._kinds: Counter[str] = Counter()
        self._servers: Counter[str] = Counter()       # errors per server
        self._answered: Counter[str] = Counter()      # answers of any kind per server
        self._last_message: dict[str, str] = {}       # kind -> its newest message
        self._newest: str | None = None
        self._trip: Trip | None = None
        self.requests_total = 0
        self.errors_total = 0

    @property
    def open(self) -> bool:
        return self._trip is not None

    @property
    def trip(self) -> Trip | None:
        return self._trip

    def observe_ok(self, server: str = "") -> None:
        self._add(None, server)

    def observe_error(self, kind: str, message: str, server: str = "") -> str | None:
        """Add one failed request; returns the pause reason when the breaker opens now."""
        self._last_message[kind] = message
        self._newest = message
        self.errors_total += 1
        self._add(kind, server)
        if self._trip is not None:
            return None
        n = len(self._recent)
        errors = sum(self._kinds.values())
        if n < self.min_samples or errors / n <= self.max_error_rate:
            return None
        worst, _ = self._kinds.most_common(1)[0]
        sample = self._last_message[worst]
        short = sample if len(sample) <= SAMPLE_CHARS else sample[:SAMPLE_CHARS - 1] + "…"
        others = ", ".join(f"{k} ×{v}" for k, v in self._kinds.most_common() if k != worst and v)
        servers = {k: v for k, v in self._servers.most_common() if v and k}
        fine = [k for k, v in self._answered.items() if v and k and not self._servers[k]]
        where = ""
        if fine and len(servers) <= FEW_SERVERS:
            where = f" on {', '.join(servers)} (the other servers answer)"
        reason = (f"{errors / n:.0%} of the last {n} requests failed{where} "
                  f"(threshold {self.max_error_rate:.0%}): {short}"
                  + (f" (also {others})" if others else ""))
        self._trip = Trip(reason, worst, sample, {k: v for k, v in self._kinds.items() if v},
                           servers)
        return reason

    def _add(self, kind: str | None, server: str) -> None:
        while len(self._recent) >= self.window:     # `while`: the window may shrink on a reload
            old_kind, old_server = self._recent.popleft()
            self._answered[old_server] -= 1
            if old_kind is not None:
                self._kinds[old_kind] -= 1
                self._servers[old_server] -= 1
        self._recent.append((kind, server))
        self._answered[server] += 1
        if kind is not None:
            self._kinds[kind] += 1
            self._servers[server] += 1
        self.requests_total += 1

    def reset(self) -> None:
        """Close the breaker and forget the window (an operator resumed)."""
        self._recent.clear()
        self._kinds.clear()
        self._servers.clear()
        self._answered.clear()
        self._newest = None
        self._trip = None

    def snapshot(self) -> BreakerSnapshot:
        n = len(self._recent)
        errors = sum(self._kinds.values())
        trip = self._trip
        return BreakerSnapshot(
            samples=n, error_rate=errors / n if n else 0.0,
            errors_by_kind={k: v for k, v in self._kinds.items() if v > 0},
            requests_total=self.requests_total, errors_total=self.errors_total,
            tripped=trip.reason if trip else None,
            last_error=self._newest if errors else None,
            tripped_kind=trip.kind if trip else None,
            tripped_sample=trip.sample if trip else None,
            errors_by_server={k: v for k, v in self._servers.items() if v > 0 and k})
