"""Graceful stop: on SIGTERM the requests in flight are minutes of GPU work, so they get
`dispatch.stop_grace_s` to finish before the servers are stopped.

The stop stops claiming at once (prompts buffered but not yet sent go back to pending), then
waits until nothing is in flight, the grace runs out, or a second SIGTERM cuts it short.
What is still in flight then is requeued by the dispatcher as the servers go (a request cut
off is not the prompt's fault: no attempt counted). The report says how many finished in
the grace, how many were requeued, and roughly how many generated tokens were thrown away
with them (each cut request's age times its server's per-request decode rate).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from supervisor.dispatch.dispatch_snapshot import InFlightRequest

if TYPE_CHECKING:
    from supervisor.dispatch.dispatcher import Dispatcher

@dataclass(frozen=True)
class StopReport:
    grace_s: float
    waited_s: float
    finished_in_grace: int
    requeued: int
    discarded_tokens: int
    cut_short: str | None     # why the wait ended before the requests did, or None

    def as_detail(self) -> dict[str, Any]:
        return {"grace_s": self.grace_s, "waited_s": round(self.waited_s, 3),
                "finished_in_grace": self.finished_in_grace, "requeued": self.requeued,
                "discarded_tokens": self.discarded_tokens, "cut_short": self.cut_short}

    def line(self) -> str:
        text = (f"{self.finished_in_grace} requests finished in the grace "
                f"({self.waited_s:.0f} s of {self.grace_s:g} s), {self.requeued} requeued, "
                f"~{self.discarded_tokens} generated tokens discarded")
        return text + (f" (cut short: {self.cut_short})" if self.cut_short else "")


def estimate_discarded_tokens(cut: Sequence[InFlightRequest], now: float,
                              server_tok_per_s: Mapping[str, float]) -> int:
    """Tokens the cut requests had generated: age × (server tok/s ÷ requests on it),
    at most each request's max tokens. Rough by nature: a request may have queued before
    decoding, and the rate is the last window's."""
    on_server: dict[str, int] = {}
    for r in cut:
        on_server[r.server] = on_server.get(r.server, 0) + 1
    total = 0.0
    for r in cut:
        per_request = server_tok_per_s.get(r.server, 0.0) / on_server[r.server]
        total += min(float(r.max_tokens), max(0.0, now - r.started) * per_request)
    return int(round(total))


class GracefulStop:
    """One stop in progress; `describe()` is what STATUS= and the status snapshot show."""

    def __init__(self, grace_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_s = grace_s
        self.clock = clock
        self.started: float | None = None
        self._cut = anyio.Event()
        self._cut_reason: str | None = None
        self.report: StopReport | None = None
        # Outcomes counted when the stop was asked for (the drain starts a moment later).
        self.completed_at_signal: int | None = None

    @property
    def active(self) -> bool:
        return self.started is not None

    def cut(self, reason: str) -> None:
        """End the wait now (a second SIGTERM)."""
        if self._cut_reason is None:
            self._cut_reason = reason
        self._cut.set()

    def describe(self, in_flight: int) -> str:
        assert self.started is not None
        left = max(0.0, self.grace_s - (self.clock() - self.started))
        if self._cut.is_set():
            return f"stopping: grace cut short ({self._cut_reason}), stopping servers"
        return (f"draining: {in_flight} requests in flight, {left:.0f} s of grace left "
                f"(SIGTERM again to cut short)")

    async def drain(self, dispatcher: Dispatcher, poll_s: float = 0.2) -> StopReport:
        """Stop claiming and wait for the requests in flight; returns what is left to cut.
        `dispatcher` gives stop_claiming(), in_flight_requests(), completed_total() and
        server_tok_per_s()."""
        self.started = self.clock()
        dispatcher.stop_claiming()      # already done by the job at the signal; idempotent
        completed_at_start = self.completed_at_signal
        if completed_at_start is None:
            completed_at_start = dispatcher.completed_total()
        with anyio.move_on_after(self.grace_s):
            while dispatcher.in_flight_requests() and not self._cut.is_set():
                with anyio.move_on_after(poll_s):
                    await self._cut.wait()
        now = self.clock()
        cut = list(dispatcher.in_flight_requests())
        if cut and self._cut_reason is None:
            self._cut_reason = f"grace of {self.grace_s:g} s ran out"
        self.report = StopReport(
            grace_s=self.grace_s, waited_s=now - self.started,
            finished_in_grace=dispatcher.completed_total() - completed_at_start,
            requeued=len(cut),
            discarded_tokens=estimate_discarded_tokens(cut, now, dispatcher.server_tok_per_s()),
            cut_short=self._cut_reason if cut else None)
        self._cut.set()
        return self.report
