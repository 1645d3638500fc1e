"""The state DB's schema and its migrations.

The schema version is SQLite's `PRAGMA user_version`. Each migration is a list of statements
run in one transaction together with the version bump, so a daemon killed mid-migration leaves
the DB at the old version, never half-way. A DB written by a newer daemon (a higher version
than this code knows) is refused rather than guessed at.

Index choices, for a million prompts:
- `prompts_status (status)`: claim ("first N pending in import order" = by rowid, which every
  index entry carries) and recount are index range scans, never a table scan.
- the partial indexes hold only the rows a query wants (done-and-unsharded, in a shard,
  truncated), so importing a million pending rows costs them nothing.
- status counts are kept in `status_counts`, moved in the same transaction as every status
  change, so `counts()` reads four rows instead of counting a million; the truncated answers
  (long, looping, cut off inside the thinking) in `truncation_counts`, by triggers.
"""

from __future__ import annotations

import sqlite3

from state.schema_audit_views import AUDIT_VIEWS, OPERATOR_ACTIONS_V11
from state.schema_tuner import TUNER_TABLES_V13
from state.schema_waste_probe import WASTE_PROBE_V14
from supervisor.contract.waste_causes import WasteCause

SCHEMA_VERSION = 14

_V1 = [
    """
    CREATE TABLE shards (
        id              INTEGER PRIMARY KEY,          -- the shard's sequence number
        key             TEXT NOT NULL UNIQUE,         -- file name / object key
        status          TEXT NOT NULL DEFAULT 'assigned'
                        CHECK (status IN ('assigned', 'written', 'uploaded')),
        version         INTEGER NOT NULL DEFAULT 1,   -- bumped on each (re)assignment
        records         INTEGER NOT NULL DEFAULT 0,
        bytes           INTEGER NOT NULL DEFAULT 0,
        sha256          TEXT,
        md5             TEXT,
        etag            TEXT,
        checksum        TEXT,
        assigned_at     REAL,
        written_at      REAL,
        uploaded_at     REAL,
        upload_attempts INTEGER NOT NULL DEFAULT 0,
        last_error      TEXT
    )
    """,
    """
    CREATE TABLE prompts (
        id                TEXT PRIMARY KEY,
        messages          TEXT NOT NULL,              -- JSON list of chat messages
        source_line       INTEGER,                    -- line in the imported file
        status            TEXT NOT NULL DEFAULT 'pending'
                          CHECK (status IN ('pending', 'in_flight', 'done', 'failed')),
        attempts          INTEGER NOT NULL DEFAULT 0,
        content           TEXT,
        reasoning_content TEXT,
        finish_reason     TEXT,
        prompt_tokens     INTEGER,
        completion_tokens INTEGER,
        reasoning_tokens  INTEGER,
        max_tokens        INTEGER,
        model             TEXT,
        server            TEXT,
        started_at        REAL,
        finished_at       REAL,
        error             TEXT,
        shard_id          INTEGER REFERENCES shards(id)
    )
    """,
    "CREATE INDEX prompts_status ON prompts (status)",
    """CREATE INDEX prompts_unsharded ON prompts (finished_at)
       WHERE status = 'done' AND shard_id IS NULL""",
    "CREATE INDEX prompts_shard ON prompts (shard_id) WHERE shard_id IS NOT NULL",
    """CREATE INDEX prompts_truncated ON prompts (max_tokens)
       WHERE status = 'done' AND finish_reason = 'length'""",
    "CREATE INDEX shards_status ON shards (status)",
    """
    CREATE TABLE status_counts (
        status TEXT PRIMARY KEY,
        n      INTEGER NOT NULL
    )
    """,
    """INSERT INTO status_counts (status, n)
       VALUES ('pending', 0), ('in_flight', 0), ('done', 0), ('failed', 0)""",
    """
    CREATE TABLE events (
        id      INTEGER PRIMARY KEY,
        time    REAL NOT NULL,
        kind    TEXT NOT NULL,
        subject TEXT NOT NULL,
        detail  TEXT NOT NULL,                        -- JSON object
        actor   TEXT NOT NULL
    )
    """,
    "CREATE INDEX events_kind ON events (kind, id)",
    """
    CREATE TABLE settings (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE server_processes (
        name       TEXT PRIMARY KEY,
        pid        INTEGER NOT NULL,
        pgid       INTEGER NOT NULL,
        argv       TEXT NOT NULL,                     -- JSON list
        started_at REAL NOT NULL
    )
    """,
]

# Degenerate loops: a truncated answer whose tail repeats itself (loop_detector.py).
_V3 = [
    # 1: truncated and looping; 0: checked, not a loop; NULL: recorded before this version.
    "ALTER TABLE prompts ADD COLUMN loop INTEGER",
    "DROP VIEW audit_truncation",
    # Truncation by the max tokens each result was generated under, split into answers that
    # were merely long (worth a re-run at a higher limit) and degenerate loops (not).
    """
    CREATE VIEW audit_truncation AS
    SELECT max_tokens, count(*) AS done,
           sum(finish_reason = 'length') AS truncated,
           round(100.0 * sum(finish_reason = 'length') / count(*), 1) AS truncated_pct,
           sum(finish_reason = 'length' AND coalesce(loop, 0) = 0) AS long,
           sum(finish_reason = 'length' AND loop = 1) AS looping,
           round(avg(completion_tokens)) AS avg_completion_tokens
    FROM prompts WHERE status = 'done'
    GROUP BY max_tokens ORDER BY max_tokens
    """,
]

# Pending prompts that were cut off once already (requeued truncated): the ETA expects each
# to run past its old limit. A tiny index (only such rows), read once a status tick.
_V4 = [
    """CREATE INDEX prompts_requeued ON prompts (max_tokens)
       WHERE status = 'pending' AND finish_reason = 'length'""",
]

# Truncation split by where the cut fell (supervisor/dispatch/quality.py): inside the thinking
# (content empty, all text in reasoning: no answer at all) or in the answer. From the columns
# every done row already has, so old rows are split too. (SQLite's trim() takes only spaces
# unless told; a blank answer may be newlines.)
_BLANK = "char(32, 9, 10, 13)"
_V5 = [
    "DROP VIEW audit_truncation",
    f"""
    CREATE VIEW audit_truncation AS
    SELECT max_tokens, count(*) AS done,
           sum(finish_reason = 'length') AS truncated,
           round(100.0 * sum(finish_reason = 'length') / count(*), 1) AS truncated_pct,
           sum(finish_reason = 'length' AND coalesce(loop, 0) = 0) AS long,
           sum(finish_reason = 'length' AND loop = 1) AS looping,
           sum(finish_reason = 'length' AND trim(coalesce(content, ''), {_BLANK}) = ''
               AND trim(coalesce(reasoning_content, ''), {_BLANK}) <> '') AS in_thinking,
           sum(finish_reason = 'length' AND NOT (trim(coalesce(content, ''), {_BLANK}) = ''
               AND trim(coalesce(reasoning_content, ''), {_BLANK}) <> '')) AS in_answer,
           round(avg(completion_tokens)) AS avg_completion_tokens
    FROM prompts WHERE status = 'done'
    GROUP BY max_tokens ORDER BY max_tokens
    """,
]

# The waste ledger (state/waste_table.py): generated tokens thrown away, by cause, and the
# tokens kept. Triggers keep `token_ledger` in step with `waste` and with the answers in
# `prompts`, in the same transaction as the change, on every path that writes a prompt.
# The causes as of version 6, spelled out: a migration is history and must not change when
# WasteCause grows (a new cause needs a new version that widens the CHECK; a test holds the
# enum to this list).
WASTE_CAUSES_V6 = ("crash", "stop", "loop", "stall", "retry", "requeue")
_CAUSES = ", ".join(f"'{c}'" for c in WASTE_CAUSES_V6)
# An answer counts as kept while it is done and not a degenerate loop.
_KEPT_NEW = "(CASE WHEN new.status = 'done' AND coalesce(new.loop, 0) = 0 THEN 1 ELSE 0 END)"
_KEPT_OLD = "(CASE WHEN old.status = 'done' AND coalesce(old.loop, 0) = 0 THEN 1 ELSE 0 END)"
# Unix seconds with a fraction (SQLite 3.40 has no unixepoch('subsec')).
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_V6 = [
    f"""
    CREATE TABLE waste (
        id        INTEGER PRIMARY KEY,
        time      REAL NOT NULL,
        cause     TEXT NOT NULL CHECK (cause IN ({_CAUSES})),
        prompt_id TEXT,                               -- NULL when not known
        server    TEXT,
        tokens    INTEGER NOT NULL CHECK (tokens >= 0),
        estimated INTEGER NOT NULL DEFAULT 0 CHECK (estimated IN (0, 1))
    )
    """,
    """
    CREATE TABLE token_ledger (
        cause    TEXT PRIMARY KEY,                    -- 'kept', or a cause of waste
        requests INTEGER NOT NULL DEFAULT 0,
        tokens   INTEGER NOT NULL DEFAULT 0
    )
    """,
    "INSERT INTO token_ledger (cause) VALUES ('kept'), "
    + ", ".join(f"('{c}')" for c in WASTE_CAUSES_V6),
    """
    CREATE TRIGGER waste_totals AFTER INSERT ON waste BEGIN
        UPDATE token_ledger SET requests = requests + 1, tokens = tokens + new.tokens
        WHERE cause = new.cause;
    END
    """,
    # Kept follows every change of a row's status, tokens or loop flag (claims fire it too,
    # and change nothing: the WHEN keeps that to one comparison).
    f"""
    CREATE TRIGGER ledger_kept AFTER UPDATE OF status, completion_tokens, loop ON prompts
    WHEN old.status = 'done' OR new.status = 'done' BEGIN
        UPDATE token_ledger
        SET requests = requests + {_KEPT_NEW} - {_KEPT_OLD},
            tokens = tokens + {_KEPT_NEW} * coalesce(new.completion_tokens, 0)
                            - {_KEPT_OLD} * coalesce(old.completion_tokens, 0)
        WHERE cause = 'kept';
    END
    """,
    # A looping answer recorded: generated, and nobody keeps it.
    f"""
    CREATE TRIGGER ledger_loop_recorded AFTER UPDATE OF status ON prompts
    WHEN new.status = 'done' AND old.status <> 'done' AND new.loop = 1 BEGIN
        INSERT INTO waste (time, cause, prompt_id, server, tokens)
        VALUES ({_NOW}, '{WasteCause.LOOP}', new.id, new.server,
                coalesce(new.completion_tokens, 0));
    END
    """,
    # A kept answer sent back to pending: its tokens are thrown away when it is regenerated.
    f"""
    CREATE TRIGGER ledger_answer_requeued AFTER UPDATE OF status ON prompts
    WHEN old.status = 'done' AND new.status <> 'done' AND coalesce(old.loop, 0) = 0 BEGIN
        INSERT INTO waste (time, cause, prompt_id, server, tokens)
        VALUES ({_NOW}, '{WasteCause.REQUEUE}', old.id, old.server,
                coalesce(old.completion_tokens, 0));
    END
    """,
    # What a DB from before the ledger already holds: its answers kept, its loops wasted
    # (earlier requeues, retries and crashes left no trace to count).
    f"""
    INSERT INTO waste (time, cause, prompt_id, server, tokens)
    SELECT coalesce(finished_at, {_NOW}), '{WasteCause.LOOP}', id, server,
           coalesce(completion_tokens, 0)
    FROM prompts WHERE status = 'done' AND loop = 1
    """,
    """
    UPDATE token_ledger
    SET (requests, tokens) = (SELECT count(*), coalesce(sum(completion_tokens), 0)
                              FROM prompts WHERE status = 'done' AND coalesce(loop, 0) = 0)
    WHERE cause = 'kept'
    """,
    # Tokens by cause with the share of all generated, and goodput on the `kept` row.
    """
    CREATE VIEW audit_waste AS
    SELECT cause, requests, tokens,
           round(100.0 * tokens / max(1, (SELECT sum(tokens) FROM token_ledger)), 2)
               AS pct_of_generated
    FROM token_ledger
    ORDER BY cause = 'kept' DESC, tokens DESC, cause
    """,
]

# Claims take pending prompts with the fewest attempts first, in import order among equals
# (prompts_table.claim): a prompt sent back by an error waits behind every untried one
# instead of being claimed again at once. Without it a systemic error spends the first
# prompts' attempts in milliseconds and fails them for good before the circuit breaker's
# window can judge, and a prompt SGLang refuses is retried back to back. The index serves
# that order straight from the pending rows (rowid is every index's last column).
_V7 = ["CREATE INDEX prompts_claim_order ON prompts (status, attempts)"]

# Truncated answers counted as they change, so `status` reads three rows instead of every
# truncated row's answer text (at 900K prompts with 18% truncated: 160K rows, half a second
# even with the partial index, since the in-thinking test reads content and reasoning).
# Triggers rather than the store's own writes: every path that writes an answer (outcomes,
# requeues, reimports, shard adoption, rebuild-state, a hand edit) moves them in its own
# transaction. The WHENs let the other updates (claims, most outcomes) pass at the cost of a
# comparison. Definitions as audit_truncation's: looping is loop = 1, long the rest, in the
# thinking when the answer is blank and the reasoning is not (either may also be looping).
_TRUNC = "{r}.status = 'done' AND {r}.finish_reason = 'length'"
_IN_THINKING = (f"trim(coalesce({{r}}.content, ''), {_BLANK}) = '' "
                f"AND trim(coalesce({{r}}.reasoning_content, ''), {_BLANK}) <> ''")


def _tally(r: str) -> str:
    """For row `r` (new or old): its share of each truncation_counts row, by `kind`."""
    trunc = _TRUNC.format(r=r)
    return (f"CASE kind WHEN 'long' THEN ({trunc} AND {r}.loop IS NOT 1) "
            f"WHEN 'looping' THEN ({trunc} AND {r}.loop IS 1) "
            f"ELSE ({trunc} AND {_IN_THINKING.format(r=r)}) END")


_V8 = [
    """
    CREATE TABLE truncation_counts (
        kind TEXT PRIMARY KEY CHECK (kind IN ('long', 'looping', 'in_thinking')),
        n    INTEGER NOT NULL
    )
    """,
    f"""
    INSERT INTO truncation_counts (kind, n)
    SELECT 'long', count(*) FROM prompts WHERE {_TRUNC.format(r='prompts')} AND loop IS NOT 1
    UNION ALL
    SELECT 'looping', count(*) FROM prompts WHERE {_TRUNC.format(r='prompts')} AND loop IS 1
    UNION ALL
    SELECT 'in_thinking', count(*) FROM prompts
    WHERE {_TRUNC.format(r='prompts')} AND {_IN_THINKING.format(r='prompts')}
    """,
    f"""
    CREATE TRIGGER truncation_counts_update
    AFTER UPDATE OF status, finish_reason, loop, content, reasoning_content ON prompts
    WHEN ({_TRUNC.format(r='old')}) OR ({_TRUNC.format(r='new')}) BEGIN
        UPDATE truncation_counts SET n = n + ({_tally('new')}) - ({_tally('old')});
    END
    """,
    f"""
    CREATE TRIGGER truncation_counts_insert AFTER INSERT ON prompts
    WHEN {_TRUNC.format(r='new')} BEGIN
        UPDATE truncation_counts SET n = n + ({_tally('new')});
    END
    """,
    f"""
    CREATE TRIGGER truncation_counts_delete AFTER DELETE ON prompts
    WHEN {_TRUNC.format(r='old')} BEGIN
        UPDATE truncation_counts SET n = n - ({_tally('old')});
    END
    """,
]

# Lines of a prompts file refused at import (supervisor/prompts/prompt_line.py says why): they are
# no prompt, so no `prompts` row, yet an auditor asks "which lines of my 900K were not run,
# and why".
# One row per (file, line): a file imported again replaces its own rows. `kind` is the
# reason's class for GROUP BY (the reason itself names the turn and part).
_V9 = [
    """
    CREATE TABLE import_refusals (
        file      TEXT NOT NULL,                      -- the prompts file, resolved
        line      INTEGER NOT NULL,                   -- 1-based line number in it
        prompt_id TEXT,                               -- the line's own id, when it had one
        kind      TEXT NOT NULL,                      -- malformed, empty_content, ...
        reason    TEXT NOT NULL,                      -- one line: where and what
        time      REAL NOT NULL,
        PRIMARY KEY (file, line)
    )
    """,
    """
    CREATE VIEW audit_import_refusals AS
    SELECT kind, count(*) AS lines, min(line) AS first_line, min(reason) AS example_reason
    FROM import_refusals
    GROUP BY kind ORDER BY lines DESC, kind
    """,
]

# The counts read for every live status (truncated, requeueable, the ETA's requeued floors)
# answered from the partial indexes alone. Without `loop`, `status` and `finish_reason` in the
# index SQLite reads each row for them, and a done row's ~12 KB of answer sits in overflow
# pages it walks to reach the columns after it: ~30 us a truncated answer, seconds a status
# at 900K prompts. Same names, so every INDEXED BY keeps its meaning.
_V10 = [
    "DROP INDEX prompts_truncated",
    """CREATE INDEX prompts_truncated ON prompts (max_tokens, loop, status, finish_reason)
       WHERE status = 'done' AND finish_reason = 'length'""",
    "DROP INDEX prompts_requeued",
    """CREATE INDEX prompts_requeued ON prompts (max_tokens, status, finish_reason)
       WHERE status = 'pending' AND finish_reason = 'length'""",
]

# Continuing truncated answers from their exact tokens (state/token_ids_table.py). The ids
# live in a table of their own, keyed by prompt id: a 4,096-token answer's ids are 16 KB, and
# in `prompts` they would sit between every audit query and the columns it reads. Kept for
# every answer that ends `length` (and for every answer when job.keep_token_ids = "all").
# `continuing` 1 marks a prompt sent back to pending to be continued from these ids: the
# claim gives such prompts out first (the partial index holds only them), and every retry of
# it starts again from the ids stored here, which only a finished continuation replaces.
# `prompts.continued_from`: the output tokens the answer's last part started from (NULL:
# generated in one go), what the shard line says. A done answer sent back to be continued
# wastes nothing, so the requeue trigger of version 6 learns to leave it alone.
_V12 = [
    """
    CREATE TABLE answer_tokens (
        prompt_id    TEXT PRIMARY KEY,
        prompt_ids   BLOB NOT NULL,                   -- uint32 little-endian, 4 bytes a token
        output_ids   BLOB NOT NULL,                   -- every sampled id so far, all parts
        in_reasoning INTEGER NOT NULL CHECK (in_reasoning IN (0, 1)),  -- cut inside <think>
        parts        INTEGER NOT NULL DEFAULT 1,      -- requests the ids came from
        continuing   INTEGER NOT NULL DEFAULT 0 CHECK (continuing IN (0, 1))
    )
    """,
    "CREATE INDEX answer_tokens_continuing ON answer_tokens (continuing) WHERE continuing = 1",
    "ALTER TABLE prompts ADD COLUMN continued_from INTEGER",
    """
    CREATE TABLE continued_totals (
        answers INTEGER NOT NULL,                     -- continuations finished
        tokens  INTEGER NOT NULL                      -- tokens they did not decode again
    )
    """,
    "INSERT INTO continued_totals (answers, tokens) VALUES (0, 0)",
    "DROP TRIGGER ledger_answer_requeued",
    f"""
    CREATE TRIGGER ledger_answer_requeued AFTER UPDATE OF status ON prompts
    WHEN old.status = 'done' AND new.status <> 'done' AND coalesce(old.loop, 0) = 0
         AND NOT EXISTS (SELECT 1 FROM answer_tokens
                         WHERE prompt_id = old.id AND continuing = 1) BEGIN
        INSERT INTO waste (time, cause, prompt_id, server, tokens)
        VALUES ({_NOW}, '{WasteCause.REQUEUE}', old.id, old.server,
                coalesce(old.completion_tokens, 0));
    END
    """,
]

# version -> statements that bring the DB from version-1 to version.
MIGRATIONS: dict[int, list[str]] = {1: _V1, 2: AUDIT_VIEWS, 3: _V3, 4: _V4, 5: _V5, 6: _V6, 7: _V7,
                                    8: _V8, 9: _V9, 10: _V10, 11: OPERATOR_ACTIONS_V11,
                                    12: _V12, 13: TUNER_TABLES_V13, 14: WASTE_PROBE_V14}


class SchemaError(RuntimeError):
    """The DB's schema is one this code cannot use."""


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> list[int]:
    """Bring the DB up to `target`; returns the versions applied. `conn` must be in
    autocommit mode (isolation_level=None): each step is its own explicit transaction."""
    current = schema_version(conn)
    if current > target:
        raise SchemaError(f"state DB has schema version {current}, this supervisor knows "
                          f"up to {target}: refusing to touch a DB from a newer version")
    applied: list[int] = []
    for version in range(current + 1, target + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the write lock: a second process may have migrated meanwhile.
            if schema_version(conn) >= version:
                conn.execute("ROLLBACK")
                continue
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {int(version)}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied.append(version)
    return applied
