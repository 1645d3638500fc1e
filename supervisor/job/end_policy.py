"""When the job's main loop ends on its own: the job is finished, or (when asked to stop
then, as the demo and `run --exit-when-paused` do) dispatch is paused with nothing in flight,
or every server has FAILED. SIGTERM/SIGINT end it from outside (supervisor/job/main_loop.py)."""

from __future__ import annotations

from supervisor.job.status import JobStatus
from supervisor.servers.server_state import ServerState


def end_reason(status: JobStatus, exit_when_paused: bool) -> str | None:
    """Why the job stops now ("finished", "paused: ...", "every server FAILED: ..."),
    or None to keep going."""
    if status.finished:
        return "finished"
    if not exit_when_paused:
        return None
    snap = status.dispatch
    if snap.paused and snap.in_flight == 0:
        return "paused: " + "; ".join(snap.paused.values())
    if status.servers and all(s.state is ServerState.FAILED for s in status.servers):
        return "every server FAILED: " + "; ".join(
            f"{s.name}: {s.state_reason}" for s in status.servers)
    return None
