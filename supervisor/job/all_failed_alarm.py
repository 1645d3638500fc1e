"""Every server FAILED: the job keeps running (an operator can reset servers over the control
socket, and a pending prompt is not lost by waiting), but it must not wait in silence. A WARNING
now and then every `interval_s`, and the STATUS= line says it for as long as it lasts."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from supervisor.job.status import JobStatus
from supervisor.servers.server_state import ServerState

log = logging.getLogger("supervisor.job")

WARN_EVERY_S = 60.0


# An attached server that went away (GONE) generates nothing either: a job whose servers are
# all FAILED or GONE waits as silently as one whose servers all FAILED.
DOWN = (ServerState.FAILED, ServerState.GONE)


def all_failed(status: JobStatus) -> bool:
    return bool(status.servers) and all(s.state in DOWN for s in status.servers)


def alarm_text(status: JobStatus) -> str:
    names = " ".join(s.name for s in status.servers)
    why = '; '.join(f'{s.name}: {s.state_reason}' for s in status.servers)
    if not any(s.state is ServerState.GONE for s in status.servers):
        return (f"every server FAILED ({why}); nothing is generated until an operator acts: "
                f"`dflash-supervisor ctl reset NAME` (servers: {names})")
    return (f"every server FAILED or GONE ({why}); nothing is generated until one is back: "
            "attached servers are probed until they answer, a FAILED one needs "
            f"`dflash-supervisor ctl reset NAME` (servers: {names})")


class AllFailedAlarm:
    def __init__(self, interval_s: float = WARN_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._last: float | None = None

    def check(self, status: JobStatus) -> bool:
        """Logs the warning when it is due; returns whether every server is FAILED."""
        if not all_failed(status):
            if self._last is not None:
                log.warning("servers are back: %d of %d not FAILED", sum(
                    1 for s in status.servers if s.state not in DOWN), len(status.servers))
            self._last = None
            return False
        now = self.clock()
        if self._last is None or now - self._last >= self.interval_s:
            log.warning("%s", alarm_text(status))
            self._last = now
        return True
