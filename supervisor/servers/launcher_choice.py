"""Which launcher runs the servers: the one place `servers.launcher` is read.

"process": this daemon's children, each in its own session (they survive the daemon's
death, not a stop of its cgroup). "systemd": one unit per server, added beside this one.
"auto": systemd when the daemon runs as a systemd service and the template unit is
installed, else process. The job chooses once, before anything runs (job/main_loop.py), so
a launcher that cannot work here stops the start with one line instead of failing every
server's start until each is FAILED.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from supervisor.servers.launcher import Launcher, template_installed, under_systemd
from supervisor.servers.process_launcher import ProcessLauncher
from supervisor.servers.systemd_launcher import SystemdLauncher


def choose_launcher(setting: str, env: Mapping[str, str] | None = None) -> Launcher:
    """The launcher `servers.launcher` names; ValueError (one line, naming the key) for one
    that cannot work on this machine or is not a launcher at all."""
    env = os.environ if env is None else env
    if setting == "auto":
        setting = "systemd" if under_systemd(env) and template_installed() else "process"
    if setting == "process":
        return ProcessLauncher()
    if setting == "systemd":
        return _systemd_launcher()
    raise ValueError(f'servers.launcher = {setting!r}: must be "auto", "process" or "systemd"')


def _systemd_launcher() -> SystemdLauncher:
    if shutil.which("systemctl") is None:
        raise ValueError('servers.launcher = "systemd": no systemctl on this machine')
    if not template_installed():
        raise ValueError('servers.launcher = "systemd": systemd has no dflash-sglang@.service '
                         "(install systemd/dflash-sglang@.service and "
                         "50-dflash-supervisor.rules: docs/install.md)")
    # The daemon unit's own StateDirectory holds the specs, whatever the servers' env says.
    return SystemdLauncher.from_env(os.environ)
