"""One line per audit event, as an operator wants to read it: what happened, why, who."""

from __future__ import annotations

import json
from typing import Any

from supervisor.client.text import duration
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.status import Event
from tui.formatting import count, one_line


def describe(event: Event) -> str:
    """The event without its time: `gpu3 READY -> BACKOFF: oom: CUDA out of memory`."""
    d = event.detail()
    k = event.kind
    if k == EventKind.SERVER_STATE:
        text = f"{event.subject} {d.get('from', '?')} → {d.get('to', '?')}"
        reason = d.get("reason")
        return f"{text}: {reason}" if reason else text
    if k == EventKind.MAX_TOKENS:
        return f"max tokens {d.get('from', '?')} → {d.get('to', '?')}"
    if k == EventKind.REQUEUE_TRUNCATED:
        return (f"requeued {d.get('count', '?')} truncated prompts "
                f"(under {d.get('below_max_tokens', '?')} tokens)")
    if k == EventKind.CONTINUE_TRUNCATED:
        kept = d.get("tokens_kept")
        text = (f"continuing {d.get('continued', '?')} truncated answers from their tokens "
                f"({count(kept) if isinstance(kept, int) else '?'} kept, under "
                f"{d.get('below_max_tokens', '?')} tokens)")
        again = d.get("from_scratch")
        return text + (f"; {again} with no stored tokens re-run from the start"
                       if again else "")
    if k == EventKind.PAUSED:
        return f"paused ({event.subject}): {d.get('reason', '')}"
    if k == EventKind.RESUMED:
        return f"resumed ({event.subject}); was: {d.get('was', '')}"
    if k == EventKind.SERVER_RETUNE:
        flags = d.get("flags")
        shown = " ".join(f"--{n} {v}" for n, v in flags.items()) if isinstance(flags, dict) else ""
        target = "all servers" if event.subject == "*" else event.subject
        return f"retune {target}: {shown}".rstrip()
    if k == EventKind.UPLOADS_STOPPED:
        return f"UPLOADS STOPPED: {d.get('reason', '')}"
    if k == EventKind.UPLOADS_FAILING:
        return f"uploads failing ({d.get('shard', '?')}): {d.get('error', '')}"
    if k == EventKind.UPLOADS_RECOVERED:
        return f"uploads recovered after {d.get('failures', '?')} failures"
    if k == EventKind.UPLOAD_CORRUPT:
        return f"{event.subject}: stored bytes differed, uploading again"
    if k == EventKind.CONTROL_ACTION:
        # The socket's audit row (who asked, what, the answer); what it changed follows as
        # its own event. Shown as the request, briefly.
        request = d.get("request")
        args = " ".join(f"{n}={json.dumps(v, ensure_ascii=False)}"
                        for n, v in request.items()) if isinstance(request, dict) else ""
        return f"asked: {event.subject} {args}".rstrip()
    if k == EventKind.JOB_STARTED:
        return f"daemon started (pid {d.get('pid', '?')}, {d.get('servers', '?')} servers)"
    if k == EventKind.JOB_STOPPED:
        return (f"daemon stopped: {d.get('reason', '?')} "
                f"({d.get('done', '?')} done, {d.get('pending', '?')} pending)")
    if k == EventKind.RECOVERED_IN_FLIGHT:
        return f"{d.get('count', '?')} prompts in flight at the last stop went back to pending"
    if k == EventKind.SERVER_OVERCOMMIT:
        what = "over-committed" if d.get("overcommitted") else "no longer over-committed"
        return f"{event.subject} {what}: {d.get('reason', '')}".rstrip(": ")
    if k == EventKind.INFLIGHT_LIMIT:
        return (f"{event.subject} in-flight limit {d.get('from', '?')} → {d.get('to', '?')} "
                f"of {d.get('max', '?')}: {d.get('reason', '')}").rstrip(": ")
    if k == EventKind.LOOP_ABORTED:
        if "samples" in d:
            return _loops_folded(event.subject, d)
        return (f"{event.subject} stopped a loop in {d.get('part', '?')} of "
                f"{d.get('prompt', '?')} at {d.get('tokens', '?')} tokens "
                f"(saved {d.get('saved', '?')}): {d.get('snippet', '')!r}")
    if k == EventKind.REQUEST_STALLED:
        if "samples" in d:
            return (f"{event.subject} aborted {_many(d, 'stalled request')} "
                    f"{_within(d)}: no token for {d.get('stall_s', '?')} s "
                    f"({_tokens(d.get('tokens'))} tokens lost); retried{_examples(d)}")
        return (f"{event.subject} aborted {d.get('prompt', '?')}: no token for "
                f"{d.get('stall_s', '?')} s after {d.get('tokens', '?')} tokens; retried")
    if k == EventKind.ORPHAN_STOPPED:
        return f"{event.subject}: stopped a server left by an earlier daemon"
    if k == EventKind.SERVER_ADOPTED:
        return (f"{event.subject}: adopted pid {d.get('pid', '?')}, up "
                f"{duration(d.get('up_s'), '?')}, "
                f"{d.get('why') or 'left running by an earlier daemon'}"
                + (f"; {d['aborted']} answers it left in flight aborted" if d.get("aborted")
                   else "") + ("; flags differ: rolling restart" if d.get("roll") else ""))
    if k == EventKind.ADOPTION_REFUSED:
        return f"{event.subject}: not adopting pid {d.get('pid', '?')}: {d.get('why', '')}"
    rest = json.dumps(d, ensure_ascii=False, separators=(", ", ": ")) if d else ""
    return f"{k} {event.subject} {rest}".rstrip()


def who(event: Event) -> str:
    """The actor; for socket actions the caller's user and pid (from SO_PEERCRED)."""
    c = event.caller
    if c is not None:
        return f"{c.user} (pid {c.pid})"
    return event.actor


def line(event: Event, limit: int = 300) -> str:
    return one_line(f"{describe(event)} — {who(event)}", limit)


# A folded row (supervisor/dispatch/event_fold.py) stands for every request of its window:
# the count and the sums first, then a few prompt ids to look up in the prompts table.
_PART = {"reasoning": "thinking", "content": "answer"}


def _loops_folded(subject: str, d: dict[str, Any]) -> str:
    parts = d.get("parts")
    split = ", ".join(f"{_PART.get(p, p)} {n}" for p, n in parts.items()) \
        if isinstance(parts, dict) and len(parts) > 1 else ""
    return (f"{subject} stopped {_many(d, 'loop')} {_within(d)} "
            f"(saved {_tokens(d.get('saved'))} tokens" + (f"; {split}" if split else "")
            + f"){_examples(d)}")


def _many(d: dict[str, Any], what: str) -> str:
    n = d.get("count")
    return f"1 {what}" if n == 1 else f"{n if isinstance(n, int) else '?'} {what}s"


def _within(d: dict[str, Any]) -> str:
    window = d.get("window_s")
    return f"in {duration(window)}" if isinstance(window, (int, float)) else "since the last"


def _tokens(n: object) -> str:
    return count(n) if isinstance(n, (int, float)) and not isinstance(n, bool) else "?"


def _examples(d: dict[str, Any]) -> str:
    samples = d.get("samples")
    ids = [str(x.get("prompt")) for x in samples if isinstance(x, dict) and "prompt" in x] \
        if isinstance(samples, list) else []
    n = d.get("count")
    more = " …" if isinstance(n, int) and n > len(ids) else ""
    return f", e.g. {', '.join(ids)}{more}" if ids else ""

