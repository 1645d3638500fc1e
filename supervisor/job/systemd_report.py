"""What the supervision loop tells systemd on each round: READY=1 once, STATUS= with the
progress line, WATCHDOG=1 at half of WatchdogSec (see supervisor/job/notify.py for the protocol)."""

from __future__ import annotations

import time

from supervisor.job.notify import Notifier
from supervisor.job.progress_line import progress_line
from supervisor.job.status import JobStatus


class SystemdReport:
    def __init__(self, notifier: Notifier) -> None:
        self.notifier = notifier
        self._ready_sent = False
        self._watchdog = notifier.watchdog_interval_s()
        self._last_ping = 0.0

    def ready(self) -> None:
        """Sent once, at the first supervision round."""
        if not self._ready_sent:
            # Ready = the daemon is up and supervising; servers loading their model for
            # minutes is progress shown in STATUS=, not a failed start.
            self.notifier.send(ready=1)
            self._ready_sent = True

    def progress(self, status: JobStatus) -> None:
        """Called once per supervision round by the loop itself: a wedged loop stops the
        pings and systemd restarts the daemon."""
        self.notifier.send(status=progress_line(status))
        now = time.monotonic()
        if self._watchdog is not None and now - self._last_ping >= self._watchdog:
            self.notifier.send(watchdog=1)
            self._last_ping = now

    def reloading(self) -> None:
        """RELOADING=1 with the CLOCK_MONOTONIC time systemd (Type=notify-reload, v253+)
        requires; older systemd ignores the field. READY=1 must follow: reloaded()."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.notifier.send(reloading=1, monotonic_usec=usec, status="reloading the config")

    def reloaded(self, outcome: str) -> None:
        self.notifier.send(ready=1, status=outcome)

    def stopping(self, reason: str) -> None:
        self.notifier.send(stopping=1, status=reason)

    def stopped(self) -> None:
        self.notifier.send(status="stopped")
        self.notifier.close()
