"""What the dispatcher publishes: per-server progress (read by the fleet's hang watchdog and
the status snapshot) and the dispatch snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.dispatch.error_breaker import BreakerSnapshot
from supervisor.dispatch.quality import QualitySnapshot
from supervisor.dispatch.rate_window import CompletionRateWindow, RateSnapshot


@dataclass
class ServerProgress:
    """What the fleet's hang watchdog and the status snapshot read about one server."""
    in_flight: int = 0                       # requests on the wire now
    peak_in_flight: int = 0
    completed: int = 0                       # outcomes of any kind since the daemon started
    answered: int = 0                        # of them, answers recorded done
    # Output tokens of those answers this server decoded (a continuation: its new part):
    # the goodput the tuner measures (supervisor/tune/measure.py).
    kept_tokens: int = 0
    last_completion_at: float | None = None  # time.monotonic()
    last_request_started_at: float | None = None
    errors: int = 0
    last_error: str | None = None
    rates: CompletionRateWindow | None = None
    # The newest token any of its streams produced this life (monotonic; None: none yet),
    # and how many of its streams wait while it streams for others (stream_deadlines.py).
    last_token_at: float | None = None
    waiting: int = 0
    # Set when enough of its requests stalled (stall_watch.py): the fleet's progress watcher
    # restarts the server with this reason. Cleared when the next life starts serving.
    hung: str | None = None


@dataclass(frozen=True)
class InFlightRequest:
    """One request on the wire (what a graceful stop waits for, or cuts)."""
    server: str
    started: float        # time.monotonic() when it was sent
    max_tokens: int


@dataclass(frozen=True)
class StreamFigures:
    """What watching streamed requests found, since the daemon started."""
    stalls: int = 0                  # requests aborted for no token in dispatch.stall_s
    loops_aborted: int = 0           # loops aborted while they ran
    loop_tokens_saved: int = 0       # max_tokens - tokens generated, over those loops


@dataclass(frozen=True)
class DispatchSnapshot:
    max_tokens: int
    paused: dict[str, str]                   # reason key -> why
    in_flight: int
    rates: RateSnapshot
    per_server: dict[str, RateSnapshot]
    quality: QualitySnapshot
    breaker: BreakerSnapshot
    streamed: StreamFigures = StreamFigures()
