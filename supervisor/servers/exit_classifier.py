"""Why a server's life ended, in words an operator can act on.

OOM is recognised from SGLang's own log lines (it often ends SIGKILLed right after them, so a
signal-9 death that follows such a line is an OOM too); an unprompted exit is a crash with its
code or signal; an unresponsive server is a hang; one that answers health probes but finishes
nothing is a stall; one we stopped on purpose is "stopped".
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable


class ExitKind(StrEnum):
    OOM = "oom"
    CRASH = "crash"
    HANG = "hang"              # health probes failed or timed out
    STALL = "stall"            # requests in flight, none completing
    STARTUP_TIMEOUT = "startup_timeout"
    STOPPED = "stopped"        # by us: restart, retune, shutdown


class Trigger(StrEnum):
    """What the supervisor saw that ended the life."""

    EXITED = "exited"
    HEALTH = "health"
    PROGRESS = "progress"
    STARTUP_TIMEOUT = "startup_timeout"
    SPAWN_FAILED = "spawn_failed"
    REQUESTED = "requested"


OOM_MARKERS = (
    "CUDA out of memory",
    "Not enough memory. Please try to increase --mem-fraction-static",
    "Prefill out of memory",
    "Decode out of memory",
    "OutOfMemoryError",  # torch.OutOfMemoryError / torch.cuda.OutOfMemoryError
)


@dataclass(frozen=True)
class ExitReason:
    kind: ExitKind
    detail: str
    exit_code: int | None = None   # the process's exit status, when it exited by itself
    signal: int | None = None      # the signal that killed it, when one did
    evidence: str | None = None    # the log line the classification rests on

    @property
    def is_failure(self) -> bool:
        return self.kind is not ExitKind.STOPPED

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


def find_oom_line(lines: Iterable[str]) -> str | None:
    """The last log line that says the server ran out of GPU memory."""
    found = None
    for line in lines:
        if any(marker in line for marker in OOM_MARKERS):
            found = line
    return found


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def describe_returncode(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        return f"killed by signal {-returncode} ({_signal_name(-returncode)})"
    return f"exited with code {returncode}"


def classify(trigger: Trigger, returncode: int | None, log_lines: Iterable[str],
             detail: str = "") -> ExitReason:
    """`returncode` is Popen's (negative = killed by that signal); `log_lines` are this life's
    lines only, so an OOM from an earlier life does not colour this one."""
    code = returncode if returncode is not None and returncode >= 0 else None
    sig = -returncode if returncode is not None and returncode < 0 else None
    if trigger is Trigger.REQUESTED:
        return ExitReason(ExitKind.STOPPED, detail or "stopped by the supervisor", code, sig)
    oom = find_oom_line(log_lines)
    if oom is not None:
        # OOM wins over what we saw: a scheduler that OOMs can leave the HTTP front end
        # hanging, and the fix (lower mem-fraction / running requests) is the same.
        seen = describe_returncode(returncode) if trigger is Trigger.EXITED else detail
        return ExitReason(ExitKind.OOM, f"{seen} after: {oom.strip()[:300]}", code, sig, oom)
    if trigger is Trigger.EXITED:
        text = describe_returncode(returncode)
        if sig == signal.SIGKILL:
            text += " (not by us; the kernel OOM killer sends this too)"
        elif code == 0:
            text += " (unexpectedly)"
        return ExitReason(ExitKind.CRASH, text, code, sig)
    if trigger is Trigger.SPAWN_FAILED:
        return ExitReason(ExitKind.CRASH, detail or "could not be started")
    if trigger is Trigger.HEALTH:
        return ExitReason(ExitKind.HANG, detail or "health probes failed", code, sig)
    if trigger is Trigger.PROGRESS:
        return ExitReason(ExitKind.STALL, detail or "no request completed", code, sig)
    return ExitReason(ExitKind.STARTUP_TIMEOUT, detail or "not ready in time", code, sig)
