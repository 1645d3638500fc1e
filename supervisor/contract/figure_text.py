"""Figures as the status text, the daemon's progress line and dflash-tui all write them: one
format for a duration and one for the truncation share, so the daemon's own lines (systemd's
STATUS=, a server's log) read like what the clients show. Standard library only: the daemon
imports it without the client."""

from __future__ import annotations


def duration(seconds: float | None, unknown: str = "--") -> str:
    """`42s`, `3m05s`, `2h07m`, `26h42m`, `3d04h`: hours up to two days, so the ETA of a
    day-long job keeps its minutes. `unknown` for None, NaN or a negative span. The one
    duration format of the status text, the progress line and dflash-tui."""
    if seconds is None or seconds != seconds or seconds < 0:
        return unknown
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400 * 2:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"



def truncation(total: float, in_thinking: float | None = None,
               in_answer: float | None = None, long: float | None = None,
               loop: float | None = None) -> str:
    """Truncated share, split by where the cut fell (inside the thinking: no answer at all)
    and, where loops were seen, into merely long and looping. Shares are 0..1."""
    text = f"trunc {100 * total:.1f}%"
    parts = []
    if in_thinking:
        parts.append(f"in thinking {100 * in_thinking:.1f}%, "
                     f"in answer {100 * (in_answer or 0.0):.1f}%")
    if loop:
        parts.append(f"long {100 * (long or 0.0):.1f}%, loop {100 * loop:.1f}%")
    return text + (f" ({'; '.join(parts)})" if parts else "")


def pause_text(source: str, reason: str) -> str:
    """`PAUSED (quality): empty answers 91%`; a reason that already says who paused
    ("paused by operator", the TUI's default) is not said twice: `PAUSED by operator`."""
    said = reason.strip()
    rest = said[len("paused "):] if said.lower().startswith("paused ") else ""
    if rest and source.lower() in rest.lower():
        return f"PAUSED {rest}"
    return f"PAUSED ({source}): {said}" if said else f"PAUSED ({source})"
