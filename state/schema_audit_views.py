"""Version 2 of the state DB's schema (schema.py runs it): the audit views, the questions an
auditor asks of the events and prompts tables, answered in SQL they need not write; and
version 11, `audit_operator_actions` again with the person apart from the process. Kept
apart because these are the migrations an auditor reads; like every migration they are
history and do not change."""

from __future__ import annotations

from supervisor.contract.event_kinds import EventKind

# Components that write events on their own; every other actor is a person (or systemd on a
# person's behalf): what an auditor means by "operator actions".
_INTERNAL_ACTORS = "('supervisor', 'quality-gate', 'disk-guard', 'uploader')"

# Audit views: the questions auditors ask, answered in SQL they need not write. Views cost
# nothing until read; each reads the indexes or small tables the daemon already keeps.
AUDIT_VIEWS = [
    # Progress by status, from the counters kept in step with every status change.
    """
    CREATE VIEW audit_progress AS
    SELECT status, n AS prompts,
           round(100.0 * n / max(1, (SELECT sum(n) FROM status_counts)), 1) AS pct
    FROM status_counts
    ORDER BY CASE status WHEN 'done' THEN 0 WHEN 'in_flight' THEN 1
                         WHEN 'pending' THEN 2 ELSE 3 END
    """,
    # Failed prompts grouped by the reason recorded (SGLang's 400 message, or the last error
    # after max_attempts).
    """
    CREATE VIEW audit_failures AS
    SELECT coalesce(error, '(no reason recorded)') AS reason, count(*) AS prompts,
           min(id) AS example_id, datetime(max(finished_at), 'unixepoch') AS last_at
    FROM prompts WHERE status = 'failed'
    GROUP BY 1 ORDER BY prompts DESC, reason
    """,
    # Server restarts by server and cause: each failure (crash, oom, hang...) that led to a
    # restart or to FAILED, and each restart an operator asked for.
    f"""
    CREATE VIEW audit_restarts AS
    SELECT subject AS server,
           CASE WHEN json_extract(detail, '$.to') = 'STOPPED' THEN 'requested by ' || actor
                ELSE coalesce(json_extract(detail, '$.exit_kind'), 'unknown') END AS cause,
           count(*) AS restarts,
           sum(json_extract(detail, '$.to') = 'FAILED') AS gave_up,
           datetime(min(time), 'unixepoch') AS first_at,
           datetime(max(time), 'unixepoch') AS last_at
    FROM events
    WHERE kind = '{EventKind.SERVER_STATE}'
      AND (json_extract(detail, '$.to') IN ('BACKOFF', 'FAILED')
           OR (json_extract(detail, '$.to') = 'STOPPED' AND actor NOT IN {_INTERNAL_ACTORS}))
    GROUP BY 1, 2 ORDER BY server, restarts DESC
    """,
    # Truncation by the max tokens each result was generated under.
    """
    CREATE VIEW audit_truncation AS
    SELECT max_tokens, count(*) AS done,
           sum(finish_reason = 'length') AS truncated,
           round(100.0 * sum(finish_reason = 'length') / count(*), 1) AS truncated_pct,
           round(avg(completion_tokens)) AS avg_completion_tokens
    FROM prompts WHERE status = 'done'
    GROUP BY max_tokens ORDER BY max_tokens
    """,
    # What people did, when: control-socket actions (user:NAME), reloads, max tokens,
    # pauses, retunes, restarts.
    f"""
    CREATE VIEW audit_operator_actions AS
    SELECT id, datetime(time, 'unixepoch') AS at, actor AS user, kind AS action, subject,
           detail
    FROM events WHERE actor NOT IN {_INTERNAL_ACTORS}
    ORDER BY id
    """,
    # Shards whose verified copy is not yet at the output.
    """
    CREATE VIEW audit_shards_not_uploaded AS
    SELECT id, key, status, records, bytes, upload_attempts, last_error,
           datetime(assigned_at, 'unixepoch') AS assigned_at,
           datetime(written_at, 'unixepoch') AS written_at
    FROM shards WHERE status <> 'uploaded'
    ORDER BY id
    """,
]


# An action over the control socket is recorded twice: a `control_action` event (the request,
# the result and the caller's uid, name and pid, supervisor/control/actions.py) and the
# event of its effect (`max_tokens`, `paused`, ...), both with the actor "NAME (uid U, pid P)"
# (supervisor/control/peer.py). Version 2's view showed both, and its `user` was that whole
# actor, so `group by user` split one person by every TUI process they ran. Version 11 folds
# each socket action into its `control_action` row (the action named by the endpoint, the
# server it named as subject) and keeps the user apart from the uid and pid. Actions from
# elsewhere (`systemd` for a reload, a command's own actor) are unchanged, one row each.
_SOCKET_ACTOR = "(actor LIKE '% (uid %, pid %)' OR actor = 'control (unknown peer)')"
OPERATOR_ACTIONS_V11 = [
    "DROP VIEW audit_operator_actions",
    f"""
    CREATE VIEW audit_operator_actions AS
    SELECT id, datetime(time, 'unixepoch') AS at,
           CASE WHEN kind = '{EventKind.CONTROL_ACTION}'
                THEN coalesce(json_extract(detail, '$.caller.user'), actor)
                ELSE actor END AS user,
           json_extract(detail, '$.caller.uid') AS uid,
           json_extract(detail, '$.caller.pid') AS pid,
           kind = '{EventKind.CONTROL_ACTION}' AS via_socket,
           CASE WHEN kind = '{EventKind.CONTROL_ACTION}' THEN subject ELSE kind END AS action,
           CASE WHEN kind = '{EventKind.CONTROL_ACTION}'
                THEN json_extract(detail, '$.request.server') ELSE subject END AS subject,
           detail
    FROM events
    WHERE actor NOT IN {_INTERNAL_ACTORS}
      AND (kind = '{EventKind.CONTROL_ACTION}' OR NOT {_SOCKET_ACTOR})
    ORDER BY id
    """,
]
