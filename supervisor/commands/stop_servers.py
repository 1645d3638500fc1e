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
import sys
from typing import Sequence

from supervisor.job.unit_job import unit_job
from supervisor.servers.systemd_launcher import LaunchError, systemctl

PATTERN = "dflash-sglang@*.service"


def running_server_units() -> list[str]:
    out = systemctl("list-units", "--plain", "--no-legend", "--state=active,activating,"
                    "deactivating,reloading", PATTERN, check=False)
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
            systemctl("stop", unit)
            print(f"dflash-supervisor stop-servers: stopped {unit} (left running by the "
                  "daemon)")
        except LaunchError as exc:
            print(f"dflash-supervisor stop-servers: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0
