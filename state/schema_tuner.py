"""Schema version 13: the tuner's tables (state/tune_table.py reads and writes them).

Apart from state/schema.py, as the audit views are (schema_audit_views.py): the statements are
the tables' own, and schema.py only orders the versions.
"""

from __future__ import annotations

# The tuner (supervisor/tune/, issue 39). `tune_trials`: one row per candidate tried on a
# canary, written when it starts and completed when its verdict is known, for an auditor to
# query. `tune_flags`: the flags a search left in force per server (its winner, promoted), so a
# daemon restarted mid-job launches (or retunes adopted servers) with them, not the config's.
TUNER_TABLES_V13 = [
    """
    CREATE TABLE tune_trials (
        id             INTEGER PRIMARY KEY,
        server         TEXT NOT NULL,                 -- the canary
        started_at     REAL NOT NULL,                 -- unix seconds
        ended_at       REAL,
        changed        TEXT NOT NULL,                 -- "max-running-requests 16 -> 32"
        flags          TEXT NOT NULL,                 -- JSON: the canary's whole flag set
        window_s       REAL,                          -- measured seconds, warm-up excluded
        answers        INTEGER,                       -- canary answers in the window
        canary_tok_s   REAL,                          -- per GPU
        controls_tok_s REAL,                          -- mean per GPU of a control
        ratio_before   REAL,
        ratio_after    REAL,
        gain           REAL,                          -- ratio_after / ratio_before - 1
        noise          REAL,                          -- the gain's relative noise
        verdict        TEXT,                          -- kept, rejected, failed, aborted
        reason         TEXT
    )
    """,
    """
    CREATE TABLE tune_flags (
        server   TEXT PRIMARY KEY,
        flags    TEXT NOT NULL,                       -- JSON: the whole flag set in force
        set_at   REAL NOT NULL,
        trial_id INTEGER                              -- the trial that won them
    )
    """,
]
