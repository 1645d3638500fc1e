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
  change, so `counts()` reads four rows instead of counting a million.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 1

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

# version -> statements that bring the DB from version-1 to version.
MIGRATIONS: dict[int, list[str]] = {1: _V1}


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
