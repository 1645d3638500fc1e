"""Taking over a server unit that an operator restarted with systemctl.

Under the systemd launcher every server is a unit of its own, so an operator may well type
`systemctl restart dflash-sglang@gpu0` rather than `dflash-supervisor ctl restart gpu0`.
systemd then stops the daemon's process and starts the unit again from the spec the daemon
wrote (unit_spec.py): the same argv, environment and job token. The daemon sees its process
end, and its next start would find the port taken by that new life and give the server up
(FAILED, waiting for an operator). Instead, before a start, the unit's new life is held to the
same proof as a server an earlier daemon left running (adoption.judge: command line, job
token, port, GPUs as the config gives them now) and, when it holds, served as it is: no
second model load. One that does not hold is stopped when it is ours but launched with
other flags, and left alone (the start then fails, saying who holds the port) when it is not
proven ours.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from supervisor.servers.adoption import Action, AdoptionVerdict, judge
from supervisor.servers.launch_command import ServerSpec, server_devices
from supervisor.servers.launcher import Launcher

log = logging.getLogger("supervisor.servers")

WHY = "started outside the daemon (its unit was restarted, e.g. by systemctl restart)"


def take_over(name: str, spec: ServerSpec, launcher: Launcher, token: str,
              base_env: Mapping[str, str] | None, grace_s: float,
              kill_wait_s: float) -> AdoptionVerdict | None:
    """The verdict to adopt the unit's running life, or None when there is none to adopt
    (nothing runs, the launcher has no units, or what runs was stopped or left alone).
    Blocking (systemctl, /proc): call from a worker thread."""
    started_outside = getattr(launcher, "started_outside", None)
    if started_outside is None:
        return None
    record = started_outside(name)
    if record is None:
        return None
    verdict = judge(record, spec, server_devices(spec, base_env), token, launcher)
    if verdict.action is Action.ADOPT:
        log.warning("%s: taking over pid %d, %s: %s", name, record.pid, WHY, verdict.why)
        return verdict
    if verdict.action in (Action.ROLL, Action.STOP) and verdict.proc is not None:
        # Ours, but not as the config wants it now: the start that follows replaces it.
        log.warning("%s: pid %d was %s, but %s: stopping it", name, record.pid, WHY,
                    verdict.why)
        launcher.stop(verdict.proc, grace_s, kill_wait_s)
        return None
    if verdict.action is Action.FOREIGN:
        log.warning("%s: not taking over pid %d: %s", name, record.pid, verdict.why)
    return None
