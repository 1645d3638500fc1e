"""The first launcher: each server a child of the daemon, in a session and process group of
its own, writing its log file itself (launcher.py says what a launcher does).

A new session keeps the server out of the daemon's terminal and process group, so Ctrl-C in
a shell reaches only the daemon (which then stops its servers itself), and a daemon killed
with SIGKILL leaves its servers running for the next daemon to adopt. Under systemd the
servers still share the service's cgroup: a stop of the unit ends them (KillMode), which is
what the systemd launcher exists to change.
"""

from __future__ import annotations

import os

from state.records import ServerProcess as ServerRecord
from supervisor.servers.launcher import LaunchRequest
from supervisor.servers.process_group import ServerProcess, leader_alive, spawn, stop_group


class ProcessLauncher:
    kind = "process"

    def launch(self, request: LaunchRequest) -> ServerProcess:
        proc = spawn(request.argv, request.env, request.log, request.header, request.cwd)
        proc.name = request.name
        return proc

    def find(self, record: ServerRecord) -> ServerProcess | None:
        if not leader_alive(record.pid, record.started_at):
            return None
        try:
            pgid = os.getpgid(record.pid)
        except OSError:
            return None
        return ServerProcess(record.pid, pgid, tuple(record.argv), record.started_at,
                             adopted=True, name=record.name)

    def stop(self, proc: ServerProcess, grace_s: float, kill_wait_s: float) -> str:
        return stop_group(proc.pgid, grace_s, proc, kill_wait_s, name=proc.name)
