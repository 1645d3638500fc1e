"""Numbers as an operator reads them: short, aligned, "n/a" for what the daemon does not know.

Formatting lives here and not in the status contract: the contract carries plain values
(seconds, bytes, rates), every screen decides how to show them.
"""

from __future__ import annotations

import time

from supervisor.client.text import duration


def count(n: float) -> str:
    """A count or rate with a k/M suffix past four digits: `987`, `12.3k`, `1.20M`."""
    if abs(n) >= 1e6:
        return f"{n / 1e6:.2f}M"
    if abs(n) >= 1e4:
        return f"{n / 1e3:.1f}k"
    if float(n).is_integer():
        return f"{int(n)}"
    return f"{n:.1f}"


def size(nbytes: float | None) -> str:
    """Bytes in powers of 1000 (what S3 consoles and `df -H` show)."""
    if nbytes is None:
        return "n/a"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} B"


def gib(nbytes: int | None) -> str:
    """GPU memory in GiB, as nvidia-smi's neighbours (nvitop) show it."""
    return "n/a" if nbytes is None else f"{nbytes / 2**30:.0f}"


def percent(rate: float | None, digits: int = 1) -> str:
    """A 0..1 rate as a percentage."""
    return "n/a" if rate is None else f"{100 * rate:.{digits}f}%"


def clock(unix_s: float) -> str:
    """Local wall-clock time of day; the operator's terminal is in the operator's zone."""
    return time.strftime("%H:%M:%S", time.localtime(unix_s))


def ago(then: float | None, now: float) -> str:
    """How long before `now` (the snapshot's own time, so a frozen screen does not lie)."""
    if then is None:
        return "never"
    return duration(max(0.0, now - then)) + " ago"


def one_line(text: str, limit: int = 200) -> str:
    """A reason or log line squeezed onto one line of at most `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
