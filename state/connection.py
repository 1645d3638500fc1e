"""The store's one SQLite connection: opening (WAL, migrations), write transactions, reads.

Two ways to open: the writer's (`open`: WAL, migrations) and the reader's (`open_readonly`:
`mode=ro`, nothing migrated, nothing written; `status` and the auditors). A reader without
write access to the DB's directory reads a WAL-mode file only through a -shm file already
beside it, as `sqlite3` does (this one also, with no -wal either, as immutable:
open_readonly); so a writer closing cleanly (`close_for_readers`) checkpoints and leaves the
file in rollback-journal mode, with no -wal/-shm beside it, which any user who may read the
file opens. The next writer's `open` turns WAL back on.

The table modules (prompts_table, shards_table, events_table, settings_table,
server_processes_table) hold the queries; `state.store.Store` composes them over this.
See state/store.py for the durability rules every transaction here follows.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import sqlite_utils

from state.schema import SCHEMA_VERSION, SchemaError, migrate, schema_version

log = logging.getLogger(__name__)

# How long a clean close waits for other connections (a `status` mid-read) to let go before
# it leaves the DB in WAL: a reader's look takes well under a second.
READER_WAIT_S = 2.0


def _wal_header(path: Path) -> bool:
    """The file's header says WAL mode (its read and write format versions are 2)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return len(head) == 20 and head[18] == 2


def dumps(value: Any) -> str:
    """Compact JSON as stored in TEXT columns."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class StoreConnection:
    def __init__(self, db: sqlite_utils.Database, path: Path) -> None:
        self.db = db
        self.path = path
        self._conn: sqlite3.Connection = db.conn
        self._lock = threading.RLock()
        # The DB's schema version: SCHEMA_VERSION for a writer (it migrated), possibly older
        # for a reader (it never migrates; a query may check what the DB has).
        self.schema_version = schema_version(self._conn)
        self.readonly = False

    # -- lifecycle ------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path) -> Self:
        path = Path(path)
        # isolation_level=None: the sqlite3 module must not open transactions behind our
        # back; every transaction here is explicit, so its extent is visible in the code.
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                               timeout=30.0)
        try:
            db = sqlite_utils.Database(conn)
            db.enable_wal()
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            migrate(conn)
        except BaseException:
            conn.close()
            raise
        return cls(db, path)

    @classmethod
    def open_readonly(cls, path: str | Path) -> Self:
        """The DB as it is, for reading only: no migration, no journal-mode change (the
        URI's mode=ro; query_only besides, so a slip is an error, not a write). A DB of an
        older schema is read as it stands (`schema_version` says which); one of a newer
        schema is refused; an empty file (or a SQLite file with no schema) is no state DB.

        A WAL-mode file with no -wal beside it (closed by a version that left WAL on, or a
        stop that could not leave it) holds all its content in the file itself: it is read
        as immutable, so no -wal/-shm is created (which a reader without write access to the
        directory cannot do, and which would outlive this reader). A writer that opens it
        meanwhile only appends to a new -wal; it changes the file itself at its first
        checkpoint, after a thousand pages, not within a reader's few milliseconds."""
        path = Path(path)
        uri = path.absolute().as_uri() + "?mode=ro"
        if _wal_header(path) and not path.with_name(path.name + "-wal").exists():
            uri += "&immutable=1"
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None,
                               timeout=30.0)
        try:
            conn.execute("PRAGMA query_only = ON")
            version = schema_version(conn)
            if version == 0:
                raise SchemaError("not a state DB (a SQLite file with no dflash-supervisor "
                                  "schema)")
            if version > SCHEMA_VERSION:
                raise SchemaError(f"state DB has schema version {version}, this supervisor "
                                  f"knows up to {SCHEMA_VERSION}: read it with a newer one")
            store = cls(sqlite_utils.Database(conn), path)
        except BaseException:
            conn.close()
            raise
        store.readonly = True
        return store

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def close_for_readers(self) -> None:
        """Close, leaving the file readable by users who cannot write its directory: every
        WAL frame checkpointed into the DB and the journal mode set back to DELETE (which
        removes -wal and -shm). Only possible once no other connection has the DB open (a
        reader, a second writer): it tries for READER_WAIT_S, then leaves it in WAL, said
        in one log line, and the next clean close tries again."""
        with self._lock:
            conn = self._conn
            try:
                if not self.readonly:
                    self._leave_wal(conn)
            finally:
                conn.close()

    def _leave_wal(self, conn: sqlite3.Connection) -> None:
        # SQLite answers "locked" at once while another connection holds the WAL open (its
        # busy handler is not asked), so the wait is ours: a reader's look is well under a
        # second, and an auditor's sqlite3 session kept open must not hold up a stop.
        conn.execute("PRAGMA busy_timeout = 100")
        deadline = time.monotonic() + READER_WAIT_S
        why = ""
        for _ in range(int(READER_WAIT_S / 0.05) + 1):
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                (mode,) = conn.execute("PRAGMA journal_mode = DELETE").fetchone()
                if str(mode).lower() == "delete":
                    return
                why = f"journal mode stays {mode}"
            except sqlite3.Error as exc:
                why = str(exc)
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        log.warning("%s: left in WAL mode (%s: another process has it open); readers need "
                    "write access to its directory until the next clean stop", self.path, why)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction. BEGIN IMMEDIATE takes the write lock up front, so a
        transaction never fails half-way on a lock upgrade."""
        with self._lock:
            conn = self._conn
            if durable:
                conn.execute("PRAGMA synchronous = FULL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                if durable:
                    conn.execute("PRAGMA synchronous = NORMAL")

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._conn.execute(sql, args).fetchall()

    @staticmethod
    def _move(conn: sqlite3.Connection, src: str, dst: str, n: int) -> None:
        """Keep status_counts in step with a status change of n prompts (same transaction)."""
        if n and src != dst:
            conn.executemany("UPDATE status_counts SET n = n + ? WHERE status = ?",
                             [(-n, src), (n, dst)])
