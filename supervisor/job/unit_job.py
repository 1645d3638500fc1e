"""What systemd is doing to the daemon's own unit when SIGTERM arrives: a stop or a restart.

Servers in units of their own outlive the daemon (servers/systemd_launcher.py). On
`systemctl restart dflash-supervisor` they should keep running for the next daemon to adopt;
on `systemctl stop` the daemon stops them. Both send the same SIGTERM; what differs is the job
systemd runs on the unit meanwhile (`systemctl list-jobs`: "restart running" or "stop
running"), which the daemon's user may read without any privilege. A declarative
StopPropagatedFrom= in the server template cannot make this call: systemd 252 also
propagates it when the daemon dies unexpectedly (a crash, before Restart= starts it again).
Blocking (runs systemctl): call from a worker thread.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

# What a SIGTERM with no job on the unit means: `kill` by hand, or `systemctl kill`; the unit
# ends after it (a clean exit is not restarted), so the servers are stopped with it.
KEEP_SERVERS_JOBS = frozenset({"restart", "try-restart", "reload-or-restart"})


def own_unit(cgroup_file: Path = Path("/proc/self/cgroup")) -> str | None:
    """The service unit this process runs in (from its cgroup path), or None outside one."""
    try:
        lines = cgroup_file.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        path = line.split(":", 2)[-1]
        for part in reversed(path.split("/")):
            if part.endswith(".service"):
                return part
    return None


def unit_job(unit: str, timeout_s: float = 10.0) -> str | None:
    """The type of the job systemd is running on the unit ("stop", "restart", ...), or None
    when it runs none (or systemctl cannot say)."""
    try:
        out = subprocess.run(["systemctl", "list-jobs", "--no-legend", "--no-pager", unit],
                             capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.stdout.splitlines():
        # "753 dflash-supervisor.service restart running"
        fields = line.split()
        if len(fields) >= 3 and fields[1] == unit:
            return fields[2]
    return None


def keep_servers_on_sigterm(unit: str | None = None) -> tuple[bool, str]:
    """Whether this SIGTERM should leave the servers running, and why (for the log line)."""
    unit = unit or own_unit()
    if unit is None:
        return False, "not running in a systemd unit"
    job = unit_job(unit)
    if job in KEEP_SERVERS_JOBS:
        return True, f"systemd is restarting {unit} ({job} job): the servers keep running"
    if job is None:
        return False, f"SIGTERM with no systemd job on {unit}: the servers are stopped"
    return False, f"systemd is stopping {unit} ({job} job): the servers are stopped"
