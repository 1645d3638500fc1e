"""What the dispatch path counts while it runs: the job's windowed rates and output lengths,
the length-based ETA's running set, each server's progress, and what watching streams found.

Written by the request path (request_path.py) as each answer is recorded; read by the status
snapshot, /metrics and the fleet's watchdogs. One object, so a reader never holds a copy.
"""

from __future__ import annotations

from collections.abc import Callable

from supervisor.dispatch.dispatch_snapshot import ServerProgress, StreamFigures
from supervisor.dispatch.length_eta import LengthEta
from supervisor.dispatch.output_lengths import LengthWindow
from supervisor.dispatch.rate_window import CompletionRateWindow, RateSnapshot


class DispatchFigures:
    def __init__(self, window_s: float, clock: Callable[[], float]) -> None:
        self.window_s = window_s
        self.clock = clock
        self.started_at = clock()
        self.rates = CompletionRateWindow(window_s, self.started_at)
        self.lengths = LengthWindow()
        self.eta = LengthEta(busy_window_s=window_s, clock=clock)
        self.servers: dict[str, ServerProgress] = {}
        self.streamed = StreamFigures()

    def progress(self, name: str) -> ServerProgress:
        p = self.servers.get(name)
        if p is None:
            p = self.servers[name] = ServerProgress(
                rates=CompletionRateWindow(self.window_s, self.clock()))
        return p

    @property
    def in_flight(self) -> int:
        return sum(p.in_flight for p in self.servers.values())

    def completed_total(self) -> int:
        """Outcomes of any kind since the daemon started."""
        return sum(p.completed for p in self.servers.values())

    def per_server(self, now: float) -> dict[str, RateSnapshot]:
        return {n: p.rates.snapshot(now) for n, p in self.servers.items()
                if p.rates is not None}
