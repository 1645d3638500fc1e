"""Version 2 of the state DB's schema (schema.py runs it): the audit views, the questions an
auditor asks of the events and prompts tables, answered in SQL they need not write. Kept
apart because it is the one migration an auditor reads; like every migration it is history
and does not change."""

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
