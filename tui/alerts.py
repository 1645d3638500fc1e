"""What must be impossible to miss: a paused job, a FAILED server, stopped uploads, a lost
daemon. Each becomes one banner line; the banner shows nothing when all is well."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from supervisor.control.contract import ServerState, Status
from tui.formatting import one_line
from tui.link_state import LinkState


class Severity(Enum):
    WARNING = "warning"    # the job is held back on purpose (paused)
    ERROR = "error"        # something broke and needs the operator


@dataclass(frozen=True)
class Alert:
    severity: Severity
    text: str


def alerts(status: Status | None, link: LinkState) -> tuple[Alert, ...]:
    out: list[Alert] = []
    if not link.connected and link.reason != "connecting":
        tries = f", attempt {link.attempts}" if link.attempts > 1 else ""
        shown = "; the figures below are the last ones received" if status else ""
        out.append(Alert(Severity.ERROR, f"DISCONNECTED — retrying{tries}: "
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
        out.append(Alert(Severity.WARNING, f"PAUSED ({p.source}): {one_line(p.reason, 160)}"))
    return tuple(out)
