"""Where dispatch pauses on bad output: every completion is checked as it arrives
(quality.py's checks), the rolling gate decides, and a trip pauses dispatch under the source
"quality" until an operator resumes it (which also clears the window)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from state.records import Completion
from supervisor.contract.pause_sources import PauseSource
from supervisor.dispatch.pauses import Pauses
from supervisor.dispatch.quality import QualityGate, check_completion

log = logging.getLogger("supervisor.dispatch")


class BadOutputPause:
    def __init__(self, gate: QualityGate, thinking: bool, pauses: Pauses,
                 on_pause: Callable[[str, tuple[str, ...]], None]) -> None:
        self.gate = gate
        self.thinking = thinking
        self.pauses = pauses              # the dispatcher's pauses
        self.on_pause = on_pause          # (reason, the last completion's problems)

    def observe(self, c: Completion, loop: bool = False) -> None:
        verdict = check_completion(c.content, c.reasoning_content, c.finish_reason,
                                   self.thinking, loop)
        trip = self.gate.observe(verdict)
        if trip and self.pauses.hold(PauseSource.QUALITY, trip):
            self.on_pause(trip, verdict.problems)
