"""Why a server's life ended, in words an operator can act on, read from SGLang's own log lines.

- config: exit status 2 after argparse's error line (a flag this SGLang does not take), or
  the interpreter's own word that the launch command cannot run at all (`can't open file`,
  `No module named ...`: SGLang or one of its packages is not installed for that Python):
  restarting cannot help, so the server is FAILED at once;
- oom: SGLang's out-of-memory lines. SGLang often ends SIGKILLed right after them (its
  launcher kills its own tree), so a signal-9 death after such a line is an OOM too;
- hang: SGLang's own watchdog gave up on a forward batch, or our health probes failed;
- crash: SGLang said a process died ("Scheduler hit an exception", "SIGQUIT received",
  "Subprocess ... crashed"), or the process ended unprompted with its code or signal;
- stall: it answers health probes but finishes nothing; stopped: we stopped it on purpose.

What SGLang 0.5.23 logs, and where (paths under `sglang/`):
- a scheduler exception: `Scheduler hit an exception: <traceback>`, then SIGQUIT to the
  launcher (`srt/managers/scheduler.py`, run_scheduler_process), which logs `SIGQUIT
  received. ... It usually means one child failed.` and SIGKILLs its tree and itself
  (`srt/managers/tokenizer_manager.py` running_phase_sigquit_handler, `srt/utils/common.py`
  kill_process_tree) -- so a crash ends by signal 9, like a kernel OOM kill does. While
  loading, the launcher's handler says `Received sigquit from a child process. It usually
  means the child failed.` instead (`srt/entrypoints/engine.py` launch_phase_sigquit_handler);
- a child gone without a traceback: `Subprocess <name> (pid=N) crashed with exit code C.`
  (`srt/utils/watchdog.py`, SubprocessWatchdog);
- the hard watchdog: `Scheduler watchdog timeout (self.watchdog_timeout=..., self.soft=False)`
  then SIGQUIT (`srt/utils/watchdog.py` WatchdogRaw; the soft one only dumps state);
- retraction, which is normal operation under memory pressure, not a failure: `KV cache pool
  is full. Retract requests. #retracted_reqs: ...` (`srt/managers/scheduler.py`); older
  releases said `Decode out of memory happened. #retracted_reqs: ...`;
- out of memory: `Not enough memory. Please try to increase --mem-fraction-static.`
  (`srt/model_executor/pool_configurator.py`), `Prefill/Decode out of memory. Try to lower
  your batch size.` (`srt/mem_cache/allocation.py`), torch's `CUDA out of memory` and the CUDA
  runtime's `CUDA error: out of memory`.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum


class ExitKind(StrEnum):
    OOM = "oom"
    CRASH = "crash"
    HANG = "hang"              # health probes failed or timed out, or SGLang's watchdog fired
    STALL = "stall"            # requests in flight, no token from the server (hang_rule.py)
    STARTUP_TIMEOUT = "startup_timeout"
    CONFIG = "config"          # the launch flags were refused: restarting cannot help
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
    "CUDA error: out of memory",
    "Not enough memory. Please try to increase --mem-fraction-static",
    "Prefill out of memory",
    "Decode out of memory",
    "OutOfMemoryError",  # torch.OutOfMemoryError / torch.cuda.OutOfMemoryError
    "Killed by the kernel's OOM killer",  # OOM_KILL_LINE: a server unit's, from systemd
)
# What a server unit's ExecStopPost writes into the server's log when systemd saw the
# kernel's OOM killer end one of its processes (commands/serve_server.py).
OOM_KILL_LINE = "Killed by the kernel's OOM killer"

# Retraction: SGLang freeing KV cache by sending requests back to its queue. It says "out of
# memory" in older releases, but the server goes on serving; it never makes a death an OOM.
RETRACTION_MARKERS = (
    "Retract requests",
    "#retracted_reqs",
    "Decode out of memory happened",
)

CRASH_MARKERS = (
    "Scheduler hit an exception",
    "SIGQUIT received",                         # the launcher once serving
    "Received sigquit from a child process",    # the launcher while loading
)
_SUBPROCESS_CRASHED = re.compile(r"Subprocess \S+ \(pid=\d+\) crashed")
# "<Scheduler|TokenizerManager|...> watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
_WATCHDOG = re.compile(r"\b\w+ watchdog timeout\b")
# argparse's error line: "<prog>: error: unrecognized arguments: --x" (prog is "sglang serve"
# for SGLang 0.5.23's prepare_server_args); never a "[time] ..." log record.
_ARGPARSE_ERROR = re.compile(
    r"^[^\s\[][^:]*: error: (unrecognized arguments|ambiguous option|argument |"
    r"the following arguments are required)")
# Exit status 2 is argparse's (parser.error → sys.exit(2)).
ARGPARSE_EXIT = 2
# Python's own lines when the command cannot run: `python3: can't open file '/x.py': [Errno
# 2] ...`, `python3: No module named sglang` (-m on a missing package), `python3: Error while
# finding module specification for 'sglang.launch_server' (ModuleNotFoundError: ...)` and a
# traceback's last line `ModuleNotFoundError: No module named 'flashinfer'`. Never a
# "[time] ..." log record: SGLang logs optional imports it falls back from.
_CANNOT_RUN = re.compile(
    r"^((\S+: )?(can't open file '.*': \[Errno \d+\]|No module named \S+|"
    r"Error while finding module specification for )|ModuleNotFoundError: No module named )")


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


def is_retraction(line: str) -> bool:
    return any(marker in line for marker in RETRACTION_MARKERS)


def find_oom_line(lines: Iterable[str]) -> str | None:
    """The last log line that says the server ran out of GPU memory (retraction is not)."""
    found = None
    for line in lines:
        if any(marker in line for marker in OOM_MARKERS) and not is_retraction(line):
            found = line
    return found


def find_argparse_error(lines: Iterable[str]) -> str | None:
    """argparse's error line: the launch flags were refused."""
    found = None
    for line in lines:
        if _ARGPARSE_ERROR.match(line.strip()):
            found = line
    return found


def find_cannot_run_line(lines: Iterable[str]) -> str | None:
    """The interpreter's line saying the launch command cannot run (see _CANNOT_RUN)."""
    for line in lines:
        if _CANNOT_RUN.match(line.strip()):
            return line
    return None


def find_watchdog_line(lines: Iterable[str]) -> str | None:
    """The last hard-watchdog timeout (a forward batch that never finished)."""
    found = None
    for line in lines:
        if _WATCHDOG.search(line) and "soft=True" not in line:
            found = line
    return found


def _is_record_start(line: str) -> bool:
    # SGLang's log records start "[2025-01-01 12:00:00 TP0] "; a traceback's lines do not.
    return line.startswith("[")


def _exception_line(lines: Sequence[str], start: int) -> str | None:
    """The `Error: message` line that ends the traceback begun at lines[start]."""
    found = None
    for line in lines[start + 1:]:
        if _is_record_start(line) or any(m in line for m in CRASH_MARKERS):
            break
        text = line.strip()
        if (text and not line[:1].isspace() and not text.startswith(("Traceback", "During handling",
                                                                   "The above exception"))):
            found = text
    return found


# A child's death by the signals a stop sends (SIGTERM, then SIGKILL), as SGLang reports it.
_OUR_STOP_ECHO = re.compile(r"crashed with exit code -(?:9|15)\b")


def find_crash_line(lines: Iterable[str]) -> str | None:
    """The first line where SGLang says one of its processes died (the cause; the SIGQUIT
    and kill lines that follow are the consequence), with the exception that ended a
    scheduler when its traceback is there."""
    seq = list(lines)
    for i, line in enumerate(seq):
        if "Scheduler hit an exception" in line:
            cause = _exception_line(seq, i)
            head = line.strip()
            return f"{head} ... {cause}" if cause and cause not in head else head
        if _SUBPROCESS_CRASHED.search(line):
            return line.strip()
    for line in seq:
        if any(m in line for m in CRASH_MARKERS):
            return line.strip()
    return None


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def describe_returncode(returncode: int | None) -> str:
    if returncode is None:
        # Only a server that is not our child ends this way (adopted, a systemd unit's):
        # there is no status to collect.
        return "exited (its exit status is unknown: not the daemon's own child)"
    if returncode < 0:
        return f"killed by signal {-returncode} ({_signal_name(-returncode)})"
    return f"exited with code {returncode}"


def describe_unasked_exit(returncode: int | None) -> str:
    """A death the supervisor did not cause, said so: "killed by signal 9" alone, on the line
    where the server moves to STOPPING, reads as if the supervisor had killed it."""
    if returncode is not None and returncode < 0:
        return f"ended on its own ({describe_returncode(returncode)}, not sent by the supervisor)"
    return f"ended on its own ({describe_returncode(returncode)})"


# "[2026-12-04 03:12:45 TP0] ": the record's time is in the log; the cause line needs none.
_RECORD_PREFIX = re.compile(r"^\[[^\]]*\]\s*")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):\s*(?:\.\.\.\s*)?")
# "supervisor.sim.faults.SimulatedCrash:" -> "SimulatedCrash:": the class says the cause.
_DOTTED_CLASS = re.compile(r"\b(?:[a-z_][\w]*\.)+([A-Z]\w*):")


def short_cause(line: str) -> str:
    """SGLang's line, or its exception, for a one-line reason: no record time, no traceback
    header, no module path (the whole traceback stays in the server's log and the event's
    evidence)."""
    text = _RECORD_PREFIX.sub("", line.strip())
    text = _TRACEBACK.sub("", text)
    return _DOTTED_CLASS.sub(r"\1:", text)[:300]


def classify(trigger: Trigger, returncode: int | None, log_lines: Iterable[str],
             detail: str = "") -> ExitReason:
    """`returncode` is Popen's (negative = killed by that signal); `log_lines` are this life's
    lines only, so an OOM from an earlier life does not colour this one."""
    code = returncode if returncode is not None and returncode >= 0 else None
    sig = -returncode if returncode is not None and returncode < 0 else None
    if trigger is Trigger.REQUESTED:
        return ExitReason(ExitKind.STOPPED, detail or "stopped by the supervisor", code, sig)
    if trigger is Trigger.SPAWN_FAILED:
        return ExitReason(ExitKind.CRASH, detail or "could not be started")
    lines = list(log_lines)
    seen = describe_returncode(returncode) if trigger is Trigger.EXITED else detail
    if trigger is Trigger.EXITED and code == ARGPARSE_EXIT:
        refused = find_argparse_error(lines)
        if refused is not None:
            return ExitReason(ExitKind.CONFIG, f"launch flags refused: {refused.strip()[:300]}",
                              code, sig, refused)
    if trigger is Trigger.EXITED and code:
        cannot_run = find_cannot_run_line(lines)
        if cannot_run is not None:
            return ExitReason(ExitKind.CONFIG, f"the launch command cannot run ({seen}): "
                              f"{cannot_run.strip()[:300]}", code, sig, cannot_run)
    oom = find_oom_line(lines)
    if oom is not None:
        # OOM wins over what we saw: a scheduler that OOMs can leave the HTTP front end
        # hanging, and the fix (lower mem-fraction / running requests) is the same.
        return ExitReason(ExitKind.OOM, f"{seen} after: {short_cause(oom)}", code, sig, oom)
    watchdog = find_watchdog_line(lines)
    if watchdog is not None:
        # SGLang's watchdog saw a forward batch run past --watchdog-timeout and took the
        # server down (SIGQUIT, then SIGKILL): a hang, whatever signal ended it.
        return ExitReason(ExitKind.HANG, f"{seen} after: {short_cause(watchdog)}", code, sig,
                          watchdog)
    crash = find_crash_line(lines)
    if crash is not None and trigger in (Trigger.HEALTH, Trigger.PROGRESS) \
            and _OUR_STOP_ECHO.search(crash):
        # We stopped a hung server: SGLang's launcher then reports the children our SIGTERM
        # (or SIGKILL) ended as "crashed with exit code -15" (-9). That is our stop, seen
        # from inside; the verdict stays what we saw (seen on the real CPU server).
        crash = None
    if crash is not None:
        # SGLang's own account of a death: its SIGKILL is its own kill_process_tree, not
        # the kernel's OOM killer.
        return ExitReason(ExitKind.CRASH, f"{seen} after: {short_cause(crash)}", code, sig,
                          crash)
    if trigger is Trigger.EXITED:
        text = describe_returncode(returncode)
        if sig == signal.SIGKILL:
            text += " (not by us; the kernel OOM killer sends this too)"
        elif code == 0:
            text += " (unexpectedly)"
        return ExitReason(ExitKind.CRASH, text, code, sig)
    if trigger is Trigger.HEALTH:
        return ExitReason(ExitKind.HANG, detail or "health probes failed", code, sig)
    if trigger is Trigger.PROGRESS:
        return ExitReason(ExitKind.STALL, detail or "no progress", code, sig)
    return ExitReason(ExitKind.STARTUP_TIMEOUT, detail or "not ready in time", code, sig)
