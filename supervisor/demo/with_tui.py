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
    # daemon while the TUI is still up. A hang-up (the terminal or SSH session closed) or a
    # SIGTERM ends the demo the same way as quitting: the daemon is stopped, not orphaned.
    previous = {sig: signal.signal(sig, handler) for sig, handler in (
        (signal.SIGINT, signal.SIG_IGN), (signal.SIGHUP, _exit), (signal.SIGTERM, _exit))}
    try:
        tui = subprocess.run([sys.executable, "-m", "tui", "--socket", socket, "--demo"])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        code = _stop(daemon)
    if tui.returncode != 0:
        _say(f"demo: dflash-tui exited with status {tui.returncode}")
    _say(f"demo: daemon stopped (exit {code}); state, shards and logs in {config_path.parent}\n"
         "      run the same command again to resume")
    return 0 if tui.returncode == 0 else 1


def _say(line: str) -> None:
    # After a hang-up the terminal is gone: saying so must not stop the daemon being stopped.
    try:
        print(line, flush=True)
    except OSError:
        pass


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _stop(daemon: subprocess.Popen[bytes]) -> int:
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        _say("demo: stopping the demo daemon and its servers…")
        try:
            daemon.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=10)
    return daemon.returncode
