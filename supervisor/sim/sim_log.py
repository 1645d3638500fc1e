"""Log lines in SGLang's shape (`[YYYY-MM-DD HH:MM:SS TP0] message`), so the daemon's log
view and its exit classifier read the simulator's output the way they read a real server's.
SGLang logs through logging.basicConfig (`sglang/srt/utils/common.py` configure_logger), whose
handler writes to stderr; so does the simulator."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def log(message: str, *, rank: str = "", stream: TextIO | None = None) -> None:
    prefix = f" {rank}" if rank else ""
    out = stream if stream is not None else sys.stderr
    out.write(f"[{_stamp()}{prefix}] {message}\n")
    out.flush()


def log_err(message: str, *, rank: str = "") -> None:
    log(message, rank=rank, stream=sys.stderr)
