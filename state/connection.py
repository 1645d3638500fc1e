"""The store's one SQLite connection: opening (WAL, migrations), write transactions, reads.

The table modules (prompts_table, shards_table, events_table, settings_table,
server_processes_table) hold the queries; `state.store.Store` composes them over this.
See state/store.py for the durability rules every transaction here follows.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Self, Sequence

import sqlite_utils

from state.schema import migrate


def dumps(value: Any) -> str:
    """Compact JSON as stored in TEXT columns."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class StoreConnection:
    def __init__(self, db: sqlite_utils.Database, path: Path) -> None:
        self.db = db
        self.path = path
        self._conn: sqlite3.Connection = db.conn
        self._lock = threading.RLock()

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

    def close(self) -> None:
        with self._lock:
            self._conn.close()

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
