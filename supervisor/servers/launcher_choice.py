"""Which launcher starts the servers: `servers.launcher` = "process", "systemd" or "auto".

"auto" picks systemd units when the daemon itself runs under systemd (INVOCATION_ID, which
systemd sets for every service) and the server template `dflash-sglang@.service` is
installed; anywhere else (the demo, a shell, a container without systemd) servers are the
daemon's children, as before. "systemd" asked for where it cannot work is refused at start
with one line, rather than silently falling back to servers that die with the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from supervisor.servers.systemd_launcher import template_installed, under_systemd


@dataclass(frozen=True)
class LauncherChoice:
    kind: str     # "process" or "systemd"
    why: str      # for the start's log line


class LauncherUnavailable(RuntimeError):
    pass


def choose_launcher(setting: str, env: Mapping[str, str],
                    installed: Callable[[], bool] = template_installed) -> LauncherChoice:
    if setting == "process":
        return LauncherChoice("process", "servers.launcher = process")
    systemd = under_systemd(env)
    if setting == "systemd":
        if not systemd:
            raise LauncherUnavailable("servers.launcher = systemd, but the daemon is not "
                                      "running under systemd (no INVOCATION_ID)")
        if not installed():
            raise LauncherUnavailable("servers.launcher = systemd, but systemd does not know "
                                      "dflash-sglang@.service (install systemd/"
                                      "dflash-sglang@.service and systemctl daemon-reload)")
        return LauncherChoice("systemd", "servers.launcher = systemd")
    if not systemd:
        return LauncherChoice("process", "not under systemd: servers are the daemon's children")
    if not installed():
        return LauncherChoice("process", "under systemd without dflash-sglang@.service "
                                         "installed: servers are the daemon's children and "
                                         "stop with it")
    return LauncherChoice("systemd", "under systemd with dflash-sglang@.service: each server "
                                     "in its own unit, outliving a daemon restart")
