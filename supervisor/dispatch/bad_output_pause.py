"""Where dispatch pauses on bad output: every completion is checked as it arrives
(quality.py's checks), the rolling gate decides, and a trip pauses dispatch under the key
"quality" until an operator resumes it (which also clears the window)."""

from __future__ import annotations

import logging
from typing import Callable

from state.records import Completion
from supervisor.dispatch.quality import QualityGate, check_completion

log = logging.getLogger("supervisor.dispatch")

QUALITY = "quality"


class BadOutputPause:
    def __init__(self, gate: QualityGate, thinking: bool, paused: dict[str, str],
                 on_pause: Callable[[str, tuple[str, ...]], None]) -> None:
        self.gate = gate
        self.thinking = thinking
        self.paused = paused              # the dispatcher's pause reasons, by key
        self.on_pause = on_pause          # (reason, the last completion's problems)

    def observe(self, c: Completion, loop: bool = False) -> None:
        verdict = check_completion(c.content, c.reasoning_content, c.finish_reason,
                                   self.thinking, loop)
        trip = self.gate.observe(verdict)
        if trip and QUALITY not in self.paused:
            self.paused[QUALITY] = trip
            log.error("dispatch paused: %s", trip)
            self.on_pause(trip, verdict.problems)
