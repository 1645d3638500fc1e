"""How a server process is started, found again and stopped: the seam between the fleet's
life cycle (managed_server.py) and whatever runs the process.

A launcher does three things, each blocking (the fleet calls them in worker threads):

- `launch(request)`: start `request.argv` with `request.env`, its stdout and stderr
  APPENDED to `request.log` (server_log.py: a file, never a pipe, so the server outlives
  the daemon), in a process group of its own; return its handle (`ServerProcess`: pid,
  pgid, argv, create_time). OSError when the command cannot run at all.
- `find(record)`: the server a state-DB record names, if that very process still runs
  (pid AND create_time: a reused pid is someone else), as a handle with `popen = None`;
  None otherwise. Only the launch facts are checked here; adoption.py asks the rest of the
  proof (command line, port, job token).
- `stop(proc, grace_s, kill_wait_s)`: SIGTERM the whole group (SGLang's schedulers hold GPU
  memory), SIGKILL after `grace_s`; "stopped" means no live member is left. Returns
  process_group.stop_group's word ("gone", "terminated", "killed", "stuck"; the systemd
  launcher adds "replaced": the unit already runs another life, not this handle's).

A launcher with units of its own (systemd) also has `started_outside(name)`: the record of
a life its unit runs that this daemon did not start (an operator's `systemctl restart`),
for unit_takeover.py to prove and take over.

A server whose process is not the daemon's child (adopted, or a systemd unit's) has no exit
code to collect: its handle's `exited` turns true when the leader is gone, and
`returncode` stays None (the exit classifier then says the status is unknown and reads the
log's last lines as usual).

`servers.launcher` picks one (launcher_choice.py): "process" (process_launcher.py),
"systemd" (systemd_launcher.py) or "auto".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from state.records import ServerProcess as ServerRecord
from supervisor.servers.process_group import ServerProcess
from supervisor.servers.server_log import ServerLog

# The template unit a systemd launcher starts as dflash-sglang@<server>.service.
SYSTEMD_TEMPLATE = "dflash-sglang@.service"
_UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
              "/usr/lib/systemd/system", "/lib/systemd/system")


@dataclass(frozen=True)
class LaunchRequest:
    """One server's launch: what runs, with what environment, and where its output goes."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    log: ServerLog
    header: str                 # the `=====` line written to the log before the launch
    cwd: str | None = None


class Launcher(Protocol):
    """Starts, finds and stops servers (see the module's docstring). Blocking methods."""

    kind: str                   # "process", "systemd": shown in logs and events

    def launch(self, request: LaunchRequest) -> ServerProcess: ...

    def find(self, record: ServerRecord) -> ServerProcess | None: ...

    def stop(self, proc: ServerProcess, grace_s: float, kill_wait_s: float) -> str: ...


def under_systemd(env: Mapping[str, str]) -> bool:
    """Whether this daemon runs as a systemd service (systemd sets INVOCATION_ID for each
    unit's processes; a login shell has none)."""
    return bool(env.get("INVOCATION_ID"))


def template_installed(dirs: tuple[str, ...] = _UNIT_DIRS) -> bool:
    return any(Path(d, SYSTEMD_TEMPLATE).exists() for d in dirs)
