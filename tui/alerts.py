"""What must be impossible to miss: a paused job, a FAILED server, stopped uploads, a lost
daemon. Each becomes one banner line; the banner shows nothing when all is well."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from supervisor.contract.event_kinds import EventKind
from supervisor.contract.figure_text import pause_text
from supervisor.contract.status import Event, ServerState, Status
from tui.formatting import one_line
from tui.link_state import LinkState


class Severity(Enum):
    WARNING = "warning"    # the job is held back on purpose (paused)
    ERROR = "error"        # something broke and needs the operator


@dataclass(frozen=True)
class Alert:
    severity: Severity
    text: str


def daemon_stop(events: tuple[Event, ...]) -> str | None:
    """Why the daemon last stopped on purpose ("finished", "stopped by SIGTERM"), when its
    newest start/stop event is a stop."""
    for e in reversed(events):
        if e.kind == EventKind.JOB_STARTED:
            return None
        if e.kind == EventKind.JOB_STOPPED:
            return str(e.detail().get("reason") or "stopped")
    return None


def alerts(status: Status | None, link: LinkState,
           events: tuple[Event, ...] = ()) -> tuple[Alert, ...]:
    out: list[Alert] = []
    if not link.connected and link.reason != "connecting":
        tries = f", attempt {link.attempts}" if link.attempts > 1 else ""
        if not link.ever_connected:
            out.append(Alert(Severity.WARNING, f"WAITING for the daemon{tries}: "
                                               f"{one_line(link.reason, 160)}"))
        else:
            stop = daemon_stop(events)
            why = f"the daemon stopped ({one_line(stop, 80)}); " if stop else ""
            shown = "; the figures below are the last ones received" if status else ""
            out.append(Alert(Severity.ERROR, f"DISCONNECTED — {why}retrying{tries}: "
                                             f"{one_line(link.reason, 160)}{shown}"))
    if status is None:
        return tuple(out)
    for s in status.servers:
        if s.state is ServerState.FAILED:
            out.append(Alert(Severity.ERROR, f"SERVER {s.name} FAILED: "
                                             f"{one_line(s.state_reason, 160)}"))
    if status.uploads is not None and status.uploads.stopped:
        out.append(Alert(Severity.ERROR, "UPLOADS STOPPED: "
                                         f"{one_line(status.uploads.stopped, 160)} "
                                         "(generation goes on; shards wait on disk)"))
    for p in status.paused:
        if p.source == "breaker":
            # Not a hold: requests are failing (a bad setting, a broken server); nothing
            # moves until someone fixes the cause and resumes.
            out.append(Alert(Severity.ERROR, f"PAUSED (breaker), REQUESTS FAILING: "
                                             f"{one_line(p.reason, 200)} (fix, then p to resume)"))
        else:
            out.append(Alert(Severity.WARNING, pause_text(p.source, one_line(p.reason, 160))))
    return tuple(out)
