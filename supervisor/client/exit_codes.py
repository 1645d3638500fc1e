"""What `status` and `ctl` exit with, and how a client error maps to it (one line on
stderr, then the status).

Exit codes (ctl, and status without a DB to fall back on):
    0   done
    1   refused by the daemon (4xx): the reason is printed
    2   bad command line
    69  unreachable: no daemon answers on the socket (EX_UNAVAILABLE)
    76  the daemon's answer did not fit this client's contract (EX_PROTOCOL: version skew)
"""

from __future__ import annotations

import sys

from supervisor.client.control_client import ControlRefused, ControlUnreachable

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_PROTOCOL = 0, 1, 2, 69, 76
PROG = "dflash-supervisor"
EXIT_CODES = __doc__.split("\n\n")[1]      # ctl's --help epilog


def fail(exc: Exception) -> int:
    print(f"{PROG}: {exc}", file=sys.stderr)
    if isinstance(exc, ControlRefused):
        return EXIT_REFUSED
    if isinstance(exc, ControlUnreachable):
        return EXIT_UNREACHABLE
    return EXIT_PROTOCOL
