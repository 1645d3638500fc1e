"""Why dispatch is paused: the sources of a pause, each lifted on its own.

Named once here, like the event kinds and the waste causes: the dispatcher pauses under one
of these, the status contract carries it as `PauseReason.source`, the control socket lifts
the ones an operator may (`LIFTABLE`), the TUI draws its banner from it. Standard library
only, like the rest of the contract; a StrEnum, so the JSON on the wire is the plain name.
"""

from __future__ import annotations

from enum import StrEnum


class PauseSource(StrEnum):
    OPERATOR = "operator"        # an operator's pause (socket, ctl, TUI); kept across restarts
    QUALITY = "quality"          # the quality gate tripped on bad output (quality.py)
    BREAKER = "breaker"          # the error breaker opened on a systemic error (error_breaker.py)
    DISK = "disk"                # the output disk ran low (uploads/disk_guard.py); lifts itself
    PROMPT_FILE = "prompt-file"  # the prompt file differs from the one the partition began with


# What an operator's resume lifts: the disk guard and the prompt-file check lift (or keep)
# their own pauses when their cause is gone.
LIFTABLE = (PauseSource.OPERATOR, PauseSource.QUALITY, PauseSource.BREAKER)
