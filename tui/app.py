"""`dflash-tui`: the terminal UI that attaches to a running daemon's control socket.

The control socket is not part of this release yet, so there is nothing to attach to; say
so plainly and point at what does work, rather than failing with an import error.
"""

from __future__ import annotations

import sys


def main() -> int:
    print("dflash-tui: this version of dflash-supervisor has no control socket to attach to yet.\n"
          "For a job's progress use `dflash-supervisor status --state PATH/TO/job.db`, or\n"
          "`systemctl status dflash-supervisor` for the daemon's live status line.",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
