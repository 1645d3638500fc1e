"""`dflash-supervisor demo --tui`: the demo's daemon in the background, dflash-tui in front.

The daemon is `dflash-supervisor run` on the demo's config, as a child in its own session
(the terminal's keys reach only the TUI); the TUI is `python -m tui` in this terminal.
Quitting the TUI stops the daemon, which stops its servers; the next run resumes.
The supervisor package never imports textual: the TUI is a separate process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

STOP_TIMEOUT_S = 60.0


def run_with_tui(config_path: Path, socket: str, log_path: Path) -> int:
    with open(log_path, "ab") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "run", "--config", str(config_path)],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
            cwd=config_path.parent)
    # The TUI owns the terminal; a stray Ctrl+C must not kill this process and orphan the
    # daemon while the TUI is still up.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        tui = subprocess.run([sys.executable, "-m", "tui", "--socket", socket])
    finally:
        signal.signal(signal.SIGINT, previous)
        code = _stop(daemon)
    if tui.returncode != 0:
        print(f"demo: dflash-tui exited with status {tui.returncode}", file=sys.stderr)
    print(f"demo: daemon stopped (exit {code}); state, shards and logs in {config_path.parent}; "
          "run the same command again to resume", flush=True)
    return 0 if tui.returncode == 0 else 1


def _stop(daemon: subprocess.Popen[bytes]) -> int:
    if daemon.poll() is None:
        print("demo: stopping the demo daemon and its servers…", flush=True)
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=10)
    return daemon.returncode
