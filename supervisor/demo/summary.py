"""What the demo prints when its job ends: the counts, then one short line per server that
failed during this run (its failures, restarts, and last cause once), where its shards are,
and how to go on. The full tracebacks stay in the servers' logs and the events' evidence.

The restart figures are counted the way the `audit_restarts` view counts them (one per
server_state event into BACKOFF or FAILED), from this run's events only, so the summary and
the view agree on a fresh demo directory.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from state.records import Event
from supervisor.contract.event_kinds import EventKind
from supervisor.contract.status import ServerState


@dataclass
class ServerFailures:
    name: str
    failures: int = 0          # lives that ended in failure (BACKOFF or FAILED)
    gave_up: str = ""          # why it went FAILED, when it did
    cause: str = ""            # the last failure's cause, without the policy's words


def failures_by_server(events: Iterable[Event], since: float) -> list[ServerFailures]:
    """Each server that failed at or after `since` (unix seconds), in name order."""
    found: dict[str, ServerFailures] = {}
    for e in events:
        if e.kind != EventKind.SERVER_STATE or e.time < since:
            continue
        try:
            to = ServerState(str(e.detail.get("to")))
        except ValueError:
            continue
        if to not in (ServerState.BACKOFF, ServerState.FAILED):
            continue
        f = found.setdefault(e.subject, ServerFailures(e.subject))
        f.failures += 1
        # "<cause>; restarting in 1.2 s" or "<cause>; <why it gives up>, waiting for an
        # operator": the cause once, the policy's verdict apart.
        cause, _, verdict = str(e.detail.get("reason", "")).rpartition("; ")
        f.cause = cause or verdict
        if to is ServerState.FAILED:
            f.gave_up = verdict.removesuffix(", waiting for an operator")
    return [found[name] for name in sorted(found)]


def server_line(f: ServerFailures) -> str:
    restarts = f.failures - (1 if f.gave_up else 0)
    counts = f"failed {f.failures} time{'s' if f.failures != 1 else ''}, " \
             f"restarted {restarts} time{'s' if restarts != 1 else ''}"
    if f.gave_up:
        counts += f", then FAILED ({f.gave_up})"
    return f"{f.name}: {counts}"


def failure_lines(failures: list[ServerFailures]) -> list[str]:
    """A line per server, then each last cause once with the servers it ended: eight servers
    that died of one driver fault get its words once, not eight times."""
    lines = [server_line(f) for f in failures]
    causes: dict[str, list[str]] = {}
    for f in failures:
        causes.setdefault(compact_cause(f.cause), []).append(f.name)
    lines += [f"last cause ({', '.join(names)}): {cause}" for cause, names in causes.items()]
    return lines


def compact_cause(cause: str) -> str:
    """"crash: killed by signal 9 (SIGKILL) after: <SGLang's line>" -> "crash: <SGLang's
    line>": SGLang kills its own tree after such a line, so the signal adds nothing here (the
    event and the log keep it)."""
    kind, sep, rest = cause.partition(": ")
    said = rest.partition(" after: ")[2]
    return f"{kind}: {said}" if sep and said else cause


def summary_lines(result: Any, where: str, wall_s: float, failures: list[ServerFailures],
                  uploads: str | None) -> list[str]:
    s = result.status
    q = s.dispatch.quality
    # Every server FAILED: the reason's head only, its tail repeats each server's cause, said
    # below once. Any other reason (a pause's) is said nowhere else: whole.
    head = result.reason
    if failures and head.startswith("every server"):
        head = head.partition(": ")[0]
    lines = [f"demo {head} in {wall_s:.0f} s: {s.done}/{s.total} done, {s.failed} failed, "
             f"{s.remaining} left",
             f"      this run: {q.checked_total} completions checked, {q.bad_total} bad, "
             f"{q.truncated_total} truncated at max_tokens "
             f"({_share(q.truncated_total, q.checked_total)} of the run's answers; the progress "
             "line's trunc is its recent window)",
             f"      ({q.thinking_truncated_total} inside the thinking, {q.loop_total} looping)"]
    if failures:
        total = sum(f.failures for f in failures)
        lines.append(f"      server failures this run: {total} (as audit_restarts counts them; "
                     "full tracebacks in logs/NAME.log)")
        lines += [f"        {line}" for line in failure_lines(failures)]
    if uploads is not None:
        lines.append(f"      uploads: {uploads}")
    lines.append(f"      shards in {where}")
    if not s.finished:
        # A fresh demo daemon starts every server again, FAILED ones included.
        lines.append("      run the same command again to resume (nothing is redone)")
    return lines


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "0%"
