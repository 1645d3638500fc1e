"""Schema version 14: the waste cause `probe` (state/waste_table.py), for the tuner's
long-batch check.

Apart from state/schema.py, as the tuner's tables are (schema_tuner.py): the statements are
the migration's own, and schema.py only orders the versions.
"""

from __future__ import annotations

# The tuner's long-batch probe (supervisor/tune/long_batch.py) decodes a full batch to the
# limit and throws it away: a cause of its own, `probe`. SQLite cannot widen a CHECK in place,
# so `waste` is rebuilt with its rows; `legacy_alter_table` keeps the rename from re-checking
# the triggers on `prompts` that insert into `waste` (they name the table, which exists again
# once renamed); the trigger on `waste` itself went with the old table and is made again.
# The causes as of version 14, spelled out (history: they must not follow WasteCause).
WASTE_CAUSES_V14 = ("crash", "stop", "loop", "stall", "retry", "requeue", "probe")
WASTE_PROBE_V14 = [
    "PRAGMA legacy_alter_table = ON",
    f"""
    CREATE TABLE waste_v14 (
        id        INTEGER PRIMARY KEY,
        time      REAL NOT NULL,
        cause     TEXT NOT NULL CHECK (cause IN ({", ".join(f"'{c}'" for c in WASTE_CAUSES_V14)})),
        prompt_id TEXT,                               -- NULL when not known (a probe)
        server    TEXT,
        tokens    INTEGER NOT NULL CHECK (tokens >= 0),
        estimated INTEGER NOT NULL DEFAULT 0 CHECK (estimated IN (0, 1))
    )
    """,
    "INSERT INTO waste_v14 (id, time, cause, prompt_id, server, tokens, estimated) "
    "SELECT id, time, cause, prompt_id, server, tokens, estimated FROM waste",
    "DROP TABLE waste",
    "ALTER TABLE waste_v14 RENAME TO waste",
    "PRAGMA legacy_alter_table = OFF",
    """
    CREATE TRIGGER waste_totals AFTER INSERT ON waste BEGIN
        UPDATE token_ledger SET requests = requests + 1, tokens = tokens + new.tokens
        WHERE cause = new.cause;
    END
    """,
    "INSERT INTO token_ledger (cause) VALUES ('probe')",
]
