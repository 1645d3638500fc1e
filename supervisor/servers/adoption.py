"""Adopting a server an earlier daemon left running, only with proof that it is this job's.

A daemon that dies (SIGKILL, a crash, an upgrade) leaves its servers loaded: each runs in a
session of its own, writing its own log file (server_log.py). Loading a model again takes
minutes, so the next daemon takes them over, but only a server it can prove is this job's,
launched as the config says now. The proof, asked in this order:

1. the state DB recorded it: the recorded pid still runs and started when recorded
   (create_time; a reused pid is someone else's process);
2. its command line is the one recorded (the record is about this very process);
3. its environment carries this job's token (`DFLASH_JOB_TOKEN`, made once per state DB):
   a process of another job (a state DB copied from another node) never matches. A
   recorded server with no token at all was started before tokens existed: it is ours by
   the record, but is not adopted (stopped, as before adoption existed);
4. its port is held by its own process group (or by nobody yet: it was still loading when
   the daemon died; READY later needs the port to be its own, as for any start);
5. its command line and GPUs equal what the config gives that server now. Where only the
   SGLang flags differ, it is adopted and serves until a rolling restart replaces it, one
   server at a time; where the command, model, port or GPUs differ it is not this server
   any more, and is stopped.

A process that fails 1 is not looked at again (the old cleanup, orphans.py, still stops the
children of a leader that is gone); one that fails 2 or 3 is never adopted and never
touched: one log line names its pid, its command and the proof that failed. Blocking
(reads /proc): call from a worker thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import psutil

from state.records import ServerProcess as ServerRecord
from supervisor.servers.launch_command import ServerSpec
from supervisor.servers.launcher import Launcher
from supervisor.servers.port_owner import listener_pids, served_by_group
from supervisor.servers.process_group import ServerProcess

log = logging.getLogger("supervisor.servers")

TOKEN_ENV = "DFLASH_JOB_TOKEN"


class Action(StrEnum):
    ADOPT = "adopt"          # every proof holds: it serves on as it is
    ROLL = "roll"            # ours, its flags differ from the config: serves until rolled
    STOP = "stop"            # ours, but not the server the config wants now
    ORPHAN = "orphan"        # its leader is gone: what is left of the group is stopped
    FOREIGN = "foreign"      # not proven ours: never adopted, never touched


@dataclass(frozen=True)
class AdoptionVerdict:
    name: str
    action: Action
    why: str
    proc: ServerProcess | None = None     # the handle, for ADOPT, ROLL and STOP

    def line(self, record: ServerRecord) -> str:
        """The one log line for this verdict."""
        pid, cmd = record.pid, _short(record.argv)
        if self.action in (Action.ADOPT, Action.ROLL):
            return f"{self.name}: adopting pid {pid} left running by an earlier daemon: {self.why}"
        if self.action is Action.FOREIGN:
            return f"{self.name}: not adopting pid {pid} ({cmd}): {self.why}"
        return f"{self.name}: not adopting pid {pid}: {self.why}"


def _short(argv: Sequence[str]) -> str:
    text = " ".join(argv)
    return text if len(text) <= 200 else text[:197] + "..."


def _cmdline(p: psutil.Process) -> list[str]:
    """Its command line. Empty for a moment right after an exec (the kernel sets the new
    argument pages last), so an empty one is read again, briefly, before it counts."""
    for _ in range(20):
        cmdline = p.cmdline()
        if cmdline:
            return cmdline
        time.sleep(0.05)
    return []


def head_length(spec_argv: Sequence[str]) -> int:
    """How much of a server's argv is the server itself (command, model, host, port, TP
    size), before the pass-through flags (launch_command.build_argv lays it out so)."""
    for i, arg in enumerate(spec_argv):
        if arg == "--port":
            j = i + 2
            if j + 1 < len(spec_argv) and spec_argv[j] == "--tp-size":
                j += 2
            return j
    return len(spec_argv)


def judge(record: ServerRecord, spec: ServerSpec | None, devices: str, token: str,
          launcher: Launcher) -> AdoptionVerdict:
    """Whether the recorded server may be adopted as `spec` (None: the config has no such
    server any more), and why. `devices`: the CUDA_VISIBLE_DEVICES the config gives it."""
    name = record.name
    proc = launcher.find(record)
    if proc is None:
        return AdoptionVerdict(name, Action.ORPHAN, "its recorded process is gone")
    try:
        p = psutil.Process(proc.pid)
        cmdline = _cmdline(p)
    except psutil.Error as exc:
        return AdoptionVerdict(name, Action.ORPHAN, f"it vanished while checked ({exc})")
    if cmdline != list(record.argv):
        return AdoptionVerdict(name, Action.FOREIGN, "its command line is not the one recorded "
                               f"(now: {_short(cmdline)})")
    try:
        environ = p.environ()
    except psutil.AccessDenied:
        return AdoptionVerdict(name, Action.FOREIGN, "its environment cannot be read, so this "
                               "job's token cannot be checked")
    except psutil.Error as exc:
        return AdoptionVerdict(name, Action.ORPHAN, f"it vanished while checked ({exc})")
    theirs = environ.get(TOKEN_ENV)
    if theirs is None:
        return AdoptionVerdict(name, Action.STOP, f"it carries no {TOKEN_ENV} (started before "
                               "adoption existed): stopping it as a leftover", proc)
    if theirs != token:
        return AdoptionVerdict(name, Action.FOREIGN, f"its {TOKEN_ENV} is not this job's "
                               "(another job's server)")
    if spec is None:
        return AdoptionVerdict(name, Action.STOP, "the config has no such server any more", proc)
    listeners = listener_pids(spec.port)
    if listeners and not served_by_group(spec.port, proc.pgid):
        return AdoptionVerdict(name, Action.STOP, f"port {spec.port} is held by another "
                               f"process ({listeners[0]}), not by its own group", proc)
    n = head_length(spec.argv)
    if cmdline[:n] != list(spec.argv[:n]):
        return AdoptionVerdict(name, Action.STOP, "its command, model or port differ from the "
                               f"config's ({_short(spec.argv[:n])})", proc)
    theirs_devices = environ.get("CUDA_VISIBLE_DEVICES")
    if theirs_devices != devices:
        return AdoptionVerdict(name, Action.STOP, f"it runs on CUDA_VISIBLE_DEVICES="
                               f"{theirs_devices}, the config gives it {devices}", proc)
    loading = "" if listeners else ", still loading (its port is not open yet)"
    if cmdline != list(spec.argv):
        return AdoptionVerdict(name, Action.ROLL, f"record, token and port hold{loading}; its "
                               "flags differ from the config's: a rolling restart replaces it",
                               proc)
    return AdoptionVerdict(name, Action.ADOPT, f"record, command line, token and port "
                           f"hold{loading}", proc)
