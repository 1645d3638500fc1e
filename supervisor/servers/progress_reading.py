"""What the hang watchdog reads of one server each tick (hang_rule.py ProgressReading): the
newest token of its streams (the dispatcher's progress record, kept by the stream sweeper),
SGLang's per-decode-step counter (sglang_monitor.py), and, where neither exists, the
completion rule's timeout derived from max tokens and the measured per-stream speed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from supervisor.config import DispatchSection, ServersSection
from supervisor.servers.dispatcher_view import ServerProgressView
from supervisor.servers.hang_rule import HANG_MARGIN, ProgressReading
from supervisor.servers.sglang_monitor import SglangMonitor
from supervisor.sglang.metrics import metrics_enabled

log = logging.getLogger("supervisor.servers")


class ProgressReader:
    def __init__(self, name: str, progress: Callable[[], ServerProgressView],
                 monitor: SglangMonitor,
                 servers: Callable[[], ServersSection], dispatch: Callable[[], DispatchSection],
                 max_tokens: Callable[[], int], clock: Callable[[], float]) -> None:
        self.name = name
        self._progress = progress          # the dispatcher's ServerProgress for this server
        self._monitor = monitor
        self._servers, self._dispatch, self._max_tokens = servers, dispatch, max_tokens
        self._clock = clock
        self._argv: Sequence[str] = ()
        # Per-stream decode speed (tok/s) measured from completions; latched while nothing
        # completes, so a hang does not stretch its own timeout.
        self._stream_speed: float | None = None
        self._speed_completed: int | None = None
        self._said = False
        self._answered_before = 0   # the server's answers before this READY life

    def new_life(self, argv: Sequence[str]) -> None:
        """A READY life begins: where it has no token signal at all, say so now."""
        self._argv, self._said = argv, False
        self._answered_before = int(self._progress().answered)
        if not self._dispatch().stream and not metrics_enabled(argv):
            self.read()

    def answered(self) -> int:
        """Answers recorded done in this READY life so far."""
        return int(self._progress().answered) - self._answered_before

    def tokens_at(self) -> float | None:
        """When SGLang's decode-token counter last moved (monotonic), where it has one."""
        m = self._monitor
        return m.tokens_moved_at if m.token_counter == "decode" else None

    def read(self) -> ProgressReading:
        p = self._progress()
        streams = self._dispatch().stream
        counter = self._monitor.token_counter == "decode"
        times = [t for t in ((p.last_token_at if streams else None), self.tokens_at())
                 if t is not None]
        derived, how = (None, "")
        if not (streams or counter):
            derived, how = self._derived_timeout(p)
            # With --enable-metrics, not before the first scrape has said what it serves.
            known = not metrics_enabled(self._argv) or self._monitor.view.polled
            if known and not self._said:
                self._said = True
                log.warning("%s: no token signal (dispatch.stream is off and SGLang's /metrics "
                            "has no decode-token counter): hung means no completion for %.0f s "
                            "(%s), never less than hang_timeout_s", self.name,
                            max(derived, self._servers().hang_timeout_s), how)
        return ProgressReading(in_flight=int(p.in_flight), token_at=max(times, default=None),
                               token_signal=streams or counter, completed=int(p.completed),
                               hung=p.hung, derived_timeout_s=derived,
                               derived_from=how,
                               answered=self.answered())

    def _derived_timeout(self, p: ServerProgressView) -> tuple[float, str]:
        """The longest answer we ask for at the measured per-stream speed, x HANG_MARGIN;
        the request timeout until a speed is measured."""
        rates = p.rates
        if rates is not None and p.in_flight > 0 and p.completed != self._speed_completed:
            self._speed_completed = p.completed
            tok_s = rates.snapshot(self._clock()).tok_per_s
            if tok_s > 0:
                self._stream_speed = tok_s / p.in_flight
        max_tokens = self._max_tokens()
        if self._stream_speed and max_tokens:
            return (HANG_MARGIN * max_tokens / self._stream_speed,
                    f"{max_tokens} max tokens at {self._stream_speed:.1f} tok/s per stream "
                    f"x{HANG_MARGIN:g}")
        return self._dispatch().request_timeout_s, "no speed measured yet: the request timeout"
