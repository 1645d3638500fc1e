"""`dflash-supervisor stop-servers [--if-stopping UNIT]`: stop every `dflash-sglang@*.service`.

The daemon stops its server units itself on `systemctl stop`. This is the safety net for when
it could not: the daemon unit's ExecStopPost runs it with `--if-stopping
dflash-supervisor.service`, so a daemon SIGKILLed at TimeoutStopSec, or dead before the stop
came, still leaves no server behind. It acts only while systemd runs a stop job on that unit:
on a restart, and after a crash (no job: Restart= starts the daemon again), the servers stay
for the next daemon to adopt. Without the option it stops them unconditionally (by hand).

Exit status: 0 (nothing to stop, or all stopped), 1 (a unit could not be stopped: one line
each, with systemd's reason).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence

# Only the standard library and unit_job: this runs at every stop and restart of the daemon's
# unit (its ExecStopPost), and importing the servers' package would add a second or so.
from supervisor.job.unit_job import unit_job

PATTERN = "dflash-sglang@*.service"
TIMEOUT_S = 120.0


def _systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", "--no-pager", "--no-ask-password", *args],
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)


def running_server_units() -> list[str]:
    out = _systemctl("list-units", "--plain", "--no-legend",
                     "--state=active,activating,deactivating,reloading", PATTERN)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dflash-supervisor stop-servers",
                                description="Stop every dflash-sglang@*.service unit.")
    p.add_argument("--if-stopping", metavar="UNIT",
                   help="only while systemd runs a stop job on UNIT (the daemon's "
                        "ExecStopPost)")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.if_stopping:
        job = unit_job(args.if_stopping)
        if job != "stop":
            return 0
    units = running_server_units()
    failed = 0
    for unit in units:
        try:
            out = _systemctl("stop", unit)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"dflash-supervisor stop-servers: {unit}: {exc}", file=sys.stderr)
            failed += 1
            continue
        if out.returncode == 0:
            print(f"dflash-supervisor stop-servers: stopped {unit} (left running by the "
                  "daemon)")
        else:
            why = (out.stderr.strip() or "failed").splitlines()[0]
            print(f"dflash-supervisor stop-servers: {unit}: {why}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0
