"""Every server FAILED or GONE (an attached server that went away generates nothing either):
the job says so as it does when every server FAILED, naming what brings one back."""

from __future__ import annotations

from supervisor.job.all_failed_alarm import AllFailedAlarm, alarm_text, all_failed
from supervisor.servers.server_state import ServerSnapshot, ServerState


def test_every_server_gone_is_an_alarm_too() -> None:
    def snap(name: str, state: ServerState) -> ServerSnapshot:
        return ServerSnapshot(name=name, gpus=(), port=1, state=state, pid=None, in_flight=0,
                              restarts=0, last_exit_reason=None, state_since=0.0,
                              max_running=8, argv=(), state_reason=f"{name} down")

    class Status:      # what the alarm reads of the job's status
        def __init__(self, *servers: ServerSnapshot) -> None:
            self.servers = servers

    down = Status(snap("gpu0", ServerState.FAILED), snap("ext0", ServerState.GONE))
    assert all_failed(down) and AllFailedAlarm().check(down)  # type: ignore[arg-type]
    text = alarm_text(down)  # type: ignore[arg-type]
    assert text.startswith("every server FAILED or GONE (gpu0: gpu0 down; ext0: ext0 down)")
    assert "attached servers are probed until they answer" in text
    assert not all_failed(Status(snap("ext0", ServerState.GONE),  # type: ignore[arg-type]
                                 snap("ext1", ServerState.READY)))
    only_failed = alarm_text(Status(snap("gpu0", ServerState.FAILED)))  # type: ignore[arg-type]
    assert only_failed.startswith("every server FAILED (gpu0: gpu0 down); nothing is generated "
                                  "until an operator acts")
