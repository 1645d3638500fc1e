"""The daemon's answer to an action, as the one line the operator sees in a notification."""

from __future__ import annotations

from supervisor.client.text import si
from supervisor.contract.actions import (
    MaxTokensResult,
    PauseResult,
    RequeueResult,
    ResetResult,
    RestartResult,
    ResumeResult,
    RetuneResult,
)
from tui.flag_text import show_value


def max_tokens(r: MaxTokensResult) -> str:
    text = f"max tokens {r.old:,} → {r.new:,}"
    if r.continued is not None:
        kept = si(r.tokens_kept or 0)
        text += f"; {r.continued:,} truncated answers to continue ({kept} tokens kept)"
        if r.from_scratch:
            text += f", {r.from_scratch:,} with no stored tokens re-run from the start"
    if r.requeued is not None:
        text += f"; {r.requeued:,} truncated prompts requeued"
    return text


def requeue(r: RequeueResult) -> str:
    below = f" (cut off under {r.below_max_tokens:,} tokens)" if r.below_max_tokens else ""
    return f"{r.count:,} {r.what} prompts back to pending{below}"


def pause(r: PauseResult) -> str:
    return f"paused: {r.reason}" if r.changed else f"already paused: {r.reason}"


def resume(r: ResumeResult) -> str:
    lifted = "; ".join(f"{p.source}: {p.reason}" for p in r.lifted)
    text = f"resumed (lifted {lifted})" if r.lifted else "nothing an operator can lift"
    if r.paused:
        text += "; still paused by " + ", ".join(f"{p.source}: {p.reason}" for p in r.paused)
    return text


def restart(r: RestartResult) -> str:
    if len(r.order) == 1:
        return f"restarting {r.order[0]} ({r.reason})"
    return f"rolling restart, each READY before the next: {', '.join(r.order)}"


def retune(r: RetuneResult) -> str:
    changes = ", ".join(f"--{c.name} {show_value(c.old)} → {show_value(c.new)}"
                        for c in r.changes) or "no change"
    return f"{changes}; restarting {', '.join(r.order)}"


def reset(r: ResetResult) -> str:
    return f"{r.server} reset (was {r.was.value}); starting again"
