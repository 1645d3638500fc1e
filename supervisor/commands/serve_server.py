"""`dflash-supervisor serve-server --spec PATH`: what a `dflash-sglang@NAME.service` unit runs.

Reads the spec file the daemon wrote (servers/unit_spec.py), sends its own stdout and stderr
to the server's log file (appending: the daemon tails it, and earlier lives stay above), and
execs the server's argv with the spec's environment. After the exec the unit's main process
is SGLang itself: systemd's MainPID, exit status and cgroup are the server's.

With --record-exit (the unit's ExecStopPost) it records instead how the server ended, from
systemd's $SERVICE_RESULT, $EXIT_CODE and $EXIT_STATUS, in NAME.exit.json beside the spec:
systemd unloads a unit that ended cleanly at once, and its exit status with it.

Exit status without an exec: 2 (the spec file is missing or malformed, one line saying so in
the unit's journal), 127 (the command could not be executed).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from supervisor.servers.exit_classifier import OOM_KILL_LINE
from supervisor.servers.unit_spec import (
    SpecError,
    UnitExit,
    UnitSpec,
    exit_path,
    read_spec,
    write_exit,
)

# systemd sets these for the server's own unit; the daemon's values (copied into the spec with
# the rest of its environment) would name the daemon's invocation, journal stream and
# directories instead.
_UNIT_OWN = ("INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "STATE_DIRECTORY",
             "LOGS_DIRECTORY", "RUNTIME_DIRECTORY", "CONFIGURATION_DIRECTORY",
             "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", "MAINPID")


def server_env(spec: UnitSpec, own: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in spec.env.items() if k not in _UNIT_OWN}
    env.update({k: own[k] for k in _UNIT_OWN if k in own})
    return env


def _redirect_output(log_path: str) -> None:
    # O_APPEND: the daemon rotates by copy-then-truncate, and appends land at the new end.
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _note_oom_kill(spec_file: Path) -> None:
    """The kernel's OOM killer ended a process of the unit (systemd's Result=oom-kill): one
    line in the server's log, where the exit classifier reads a death's cause (a SIGKILL
    alone only says "the OOM killer is the usual suspect")."""
    try:
        spec = read_spec(spec_file)
        if spec.log_path:
            with open(spec.log_path, "a") as f:
                f.write(f"{OOM_KILL_LINE} (systemd: {spec.name}'s unit Result=oom-kill)\n")
    except (SpecError, OSError):
        pass  # the exit record above says it too


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dflash-supervisor serve-server",
                                description="Exec one SGLang server from the spec file the "
                                            "daemon wrote (what dflash-sglang@.service runs).")
    p.add_argument("--spec", required=True, type=Path, help="the server's spec file")
    p.add_argument("--record-exit", action="store_true",
                   help="record how the server ended (the unit's ExecStopPost)")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.record_exit:
        env = os.environ
        unit_exit = UnitExit(env.get("INVOCATION_ID", ""), env.get("SERVICE_RESULT", ""),
                             env.get("EXIT_CODE", ""), env.get("EXIT_STATUS", ""))
        write_exit(exit_path(args.spec), unit_exit)
        if unit_exit.result == "oom-kill":
            _note_oom_kill(args.spec)
        return 0
    try:
        spec = read_spec(args.spec)
    except SpecError as exc:
        print(f"dflash-supervisor serve-server: {exc}", file=sys.stderr)
        return 2
    env = server_env(spec, dict(os.environ))
    try:
        if spec.log_path:
            _redirect_output(spec.log_path)
        if spec.cwd:
            os.chdir(spec.cwd)
        sys.stdout.flush()
        os.execvpe(spec.argv[0], list(spec.argv), env)
    except OSError as exc:
        # After the redirect this line lands in the server's log, where the daemon looks.
        print(f"dflash-supervisor serve-server: {spec.name}: could not start "
              f"{spec.argv[0]!r}: {exc}", file=sys.stderr)
        return 127
    return 127  # not reached: execvpe returns only by raising
