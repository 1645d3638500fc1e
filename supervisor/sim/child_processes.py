"""Sleeping child processes in the simulator's process group.

Real SGLang forks a scheduler per TP rank and a detokenizer; if the supervisor signals only
the leader, those children live on and keep the GPU's memory. With --sim-children N the
simulator has such children too, so the daemon's process-group stop is tested for real: they
stay in our group and die with it, but not with the leader alone (SIGKILL of the leader
leaves them behind, exactly the stray the supervisor must clean up).
"""

from __future__ import annotations

import signal
import subprocess
import sys

# The marker argument names the child in `ps`, so an operator or a test can tell it apart.
_CHILD_CODE = "import time\nwhile True:\n    time.sleep(3600)\n"


def spawn_children(count: int, port: int) -> list[subprocess.Popen]:
    children = []
    for rank in range(count):
        name = f"sglang::scheduler_TP{rank}" if rank < count - 1 or count == 1 \
            else "sglang::detokenizer"
        children.append(subprocess.Popen(
            [sys.executable, "-c", _CHILD_CODE, name, f"port={port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True))   # same session and process group as us: that is the point
    return children


def kill_children(children: list[subprocess.Popen]) -> None:
    """What SGLang's launcher does on a clean exit or a crash: take its tree down with it."""
    for child in children:
        if child.poll() is None:
            try:
                child.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
    for child in children:
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
