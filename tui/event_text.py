"""One line per audit event, as an operator wants to read it: what happened, why, who."""

from __future__ import annotations

import json

from supervisor.contract.status import Event
from supervisor.contract.event_kinds import EventKind
from tui.formatting import one_line


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
        return (f"{event.subject} stopped a loop in {d.get('part', '?')} of "
                f"{d.get('prompt', '?')} at {d.get('tokens', '?')} tokens "
                f"(saved {d.get('saved', '?')}): {d.get('snippet', '')!r}")
    if k == EventKind.REQUEST_STALLED:
        return (f"{event.subject} aborted {d.get('prompt', '?')}: no token for "
                f"{d.get('stall_s', '?')} s after {d.get('tokens', '?')} tokens; retried")
    if k == EventKind.ORPHAN_STOPPED:
        return f"{event.subject}: stopped a server left by an earlier daemon"
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
