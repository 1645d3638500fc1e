"""The job's state: one SQLite file, one connection, every query the daemon runs.

Synchronous and thread-safe: one connection (check_same_thread=False) behind a lock, so calls
from worker threads (AsyncStore, the shard writer's thread) are serialised. Every method that
changes state is one transaction (BEGIN IMMEDIATE ... COMMIT); a process killed at any point
leaves the DB as it was before or after that transaction, never in between.

Durability: WAL with synchronous=NORMAL. A commit is safe from a killed *process* the moment
it returns (the WAL is in the OS page cache); only a power cut or kernel crash can lose the last
few commits, and SQLite rolls them back cleanly. For claims and results that is harmless: a lost
result is simply generated again. It is not harmless once a result has left the DB (a shard
file, an upload): so `assign_shards`, the step just before any byte is written outside the DB,
commits with synchronous=FULL, which fsyncs the WAL and with it every earlier commit. Anything
that can appear in an output file is therefore durable first. A fsync per result would cost
throughput for no gain in correctness.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import sqlite_utils

from state.crash_points import crash_point
from state.records import (
    DONE, FAILED, IN_FLIGHT, PENDING, SHARD_ASSIGNED, SHARD_UPLOADED, SHARD_WRITTEN, STATUSES,
    ClaimedPrompt, Done, Event, Failed, ImportRow, Outcome, Requeue, Retry, ServerProcess, Shard,
    ShardLine, StatusCounts)
from state.schema import migrate

_SHARD_COLUMNS = ("id, key, status, records, bytes, sha256, md5, etag, checksum, written_at, "
                  "uploaded_at, upload_attempts, last_error, version")

_LINE_COLUMNS = ("id, messages, content, reasoning_content, finish_reason, prompt_tokens, "
                 "completion_tokens, reasoning_tokens, max_tokens, model, server, attempts, "
                 "finished_at")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class Store:
    def __init__(self, db: sqlite_utils.Database, path: Path) -> None:
        self.db = db
        self.path = path
        self._conn: sqlite3.Connection = db.conn
        self._lock = threading.RLock()

    # -- lifecycle ------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path) -> Store:
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

    def __enter__(self) -> Store:
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

    # -- prompts ------------------------------------------------------------------------------

    def import_batch(self, rows: Sequence[ImportRow]) -> tuple[int, int]:
        """Insert new prompts as pending; ids already present are left alone.
        Returns (inserted, duplicates)."""
        if not rows:
            return 0, 0
        with self._tx() as conn:
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO prompts (id, messages, source_line) VALUES (?, ?, ?)",
                [(r.id, _dumps(r.messages), r.source_line) for r in rows])
            inserted = conn.total_changes - before
            conn.execute("UPDATE status_counts SET n = n + ? WHERE status = 'pending'",
                         (inserted,))
        return inserted, len(rows) - inserted

    def recover_in_flight(self) -> int:
        """Every in-flight prompt back to pending (run at start: whoever had them is gone).
        Not an attempt: the prompt did nothing wrong."""
        with self._tx() as conn:
            n = conn.execute("UPDATE prompts SET status = 'pending' WHERE status = 'in_flight'"
                             ).rowcount
            self._move(conn, IN_FLIGHT, PENDING, n)
        return n

    def claim(self, limit: int, server: str, now: float) -> list[ClaimedPrompt]:
        """Up to `limit` pending prompts, in import order, now in flight on `server`."""
        if limit <= 0:
            return []
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT rowid, id, messages, attempts FROM prompts WHERE status = 'pending' "
                "ORDER BY rowid LIMIT ?", (limit,)).fetchall()
            if not rows:
                return []
            conn.executemany(
                "UPDATE prompts SET status = 'in_flight', server = ?, started_at = ? "
                "WHERE rowid = ?", [(server, now, r[0]) for r in rows])
            self._move(conn, PENDING, IN_FLIGHT, len(rows))
            crash_point("claim.mid_tx")
        return [ClaimedPrompt(r[1], json.loads(r[2]), r[3]) for r in rows]

    def record(self, outcomes: Sequence[Outcome]) -> None:
        """Apply a batch of outcomes in one transaction (group commit). An outcome for a
        prompt that is not in flight is ignored: a late answer after a requeue must not
        overwrite the state the requeue set."""
        if not outcomes:
            return
        with self._tx() as conn:
            for outcome in outcomes:
                self._apply(conn, outcome)
            crash_point("record.mid_tx")

    def _apply(self, conn: sqlite3.Connection, o: Outcome) -> None:
        if isinstance(o, Done):
            got = conn.execute(
                "UPDATE prompts SET status = 'done', attempts = attempts + 1, error = NULL, "
                "content = ?, reasoning_content = ?, finish_reason = ?, prompt_tokens = ?, "
                "completion_tokens = ?, reasoning_tokens = ?, max_tokens = ?, model = ?, "
                "server = ?, started_at = ?, finished_at = ? "
                "WHERE id = ? AND status = 'in_flight' RETURNING shard_id",
                (o.content, o.reasoning_content, o.finish_reason, o.prompt_tokens,
                 o.completion_tokens, o.reasoning_tokens, o.max_tokens, o.model, o.server,
                 o.started_at, o.finished_at, o.id)).fetchall()
            if got:
                self._move(conn, IN_FLIGHT, DONE, 1)
                shard_id = got[0][0]
                if shard_id is not None:
                    # A regenerated prompt keeps its shard: rewrite it (and re-upload it).
                    conn.execute("UPDATE shards SET status = 'assigned', version = version + 1 "
                                 "WHERE id = ?", (shard_id,))
        elif isinstance(o, Retry):
            got = conn.execute(
                "UPDATE prompts SET attempts = attempts + 1, error = ?, "
                "status = CASE WHEN attempts + 1 >= ? THEN 'failed' ELSE 'pending' END "
                "WHERE id = ? AND status = 'in_flight' RETURNING status",
                (o.error, o.max_attempts, o.id)).fetchall()
            if got:
                self._move(conn, IN_FLIGHT, got[0][0], 1)
        elif isinstance(o, Failed):
            n = conn.execute(
                "UPDATE prompts SET status = 'failed', attempts = attempts + 1, error = ? "
                "WHERE id = ? AND status = 'in_flight'", (o.error, o.id)).rowcount
            self._move(conn, IN_FLIGHT, FAILED, n)
        elif isinstance(o, Requeue):
            n = conn.execute("UPDATE prompts SET status = 'pending' "
                             "WHERE id = ? AND status = 'in_flight'", (o.id,)).rowcount
            self._move(conn, IN_FLIGHT, PENDING, n)
        else:
            raise TypeError(f"not an outcome: {o!r}")

    def requeue_truncated(self, below_max_tokens: int) -> int:
        """Done prompts cut off (finish_reason 'length') at a max_tokens below the given one
        go back to pending. Their result and shard stay until the new result replaces them,
        so the output never loses a line meanwhile."""
        with self._tx() as conn:
            n = conn.execute(
                "UPDATE prompts INDEXED BY prompts_truncated SET status = 'pending' "
                "WHERE status = 'done' AND finish_reason = 'length' AND max_tokens < ?", (below_max_tokens,)).rowcount
            self._move(conn, DONE, PENDING, n)
        return n

    def requeue_ids(self, ids: Sequence[str]) -> int:
        """Put the given done or failed prompts back to pending (an operator's re-run).
        Attempts are kept: they are the audit trail."""
        n_total = 0
        with self._tx() as conn:
            for src in (DONE, FAILED):
                n = 0
                for pid in ids:
                    n += conn.execute("UPDATE prompts SET status = 'pending' "
                                      "WHERE id = ? AND status = ?", (pid, src)).rowcount
                self._move(conn, src, PENDING, n)
                n_total += n
        return n_total

    def counts(self) -> StatusCounts:
        rows = dict(self._read("SELECT status, n FROM status_counts"))
        return StatusCounts(**{s: int(rows.get(s, 0)) for s in STATUSES})

    def recount(self) -> StatusCounts:
        """Rebuild status_counts from the prompts themselves (one index scan). Only needed if
        someone edited `prompts` by hand; the daemon keeps the counts exact on its own."""
        with self._tx() as conn:
            real = dict(conn.execute(
                "SELECT status, count(*) FROM prompts GROUP BY status").fetchall())
            conn.executemany("UPDATE status_counts SET n = ? WHERE status = ?",
                             [(int(real.get(s, 0)), s) for s in STATUSES])
        return self.counts()

    def truncated_count(self, below_max_tokens: int | None = None) -> int:
        """Done prompts that hit their token limit (those under `below_max_tokens` only,
        when given: what requeue_truncated would re-run). Partial-index backed."""
        sql = ("SELECT count(*) FROM prompts INDEXED BY prompts_truncated "
               "WHERE status = 'done' AND finish_reason = 'length'")
        if below_max_tokens is None:
            return int(self._read(sql)[0][0])
        return int(self._read(sql + " AND max_tokens < ?", (below_max_tokens,))[0][0])

    def unsharded_done(self) -> int:
        """Done results not yet in a shard (the next shard fills up from these)."""
        return int(self._read("SELECT count(*) FROM prompts INDEXED BY prompts_unsharded "
                              "WHERE status = 'done' AND shard_id IS NULL")[0][0])

    def prompt_status(self, prompt_id: str) -> tuple[str, int, str | None] | None:
        """(status, attempts, error) of one prompt, or None if unknown."""
        rows = self._read("SELECT status, attempts, error FROM prompts WHERE id = ?",
                          (prompt_id,))
        return tuple(rows[0]) if rows else None  # type: ignore[return-value]

    def failed_prompts(self, limit: int = 100) -> list[tuple[str, int, str | None]]:
        """(id, attempts, error) of failed prompts, in import order."""
        return [tuple(r) for r in self._read(  # type: ignore[misc]
            "SELECT id, attempts, error FROM prompts WHERE status = 'failed' "
            "ORDER BY rowid LIMIT ?", (limit,))]

    # -- settings -----------------------------------------------------------------------------

    def get_setting(self, key: str, default: str | None = None) -> str | None:
        rows = self._read("SELECT value FROM settings WHERE key = ?", (key,))
        return rows[0][0] if rows else default

    def set_setting(self, key: str, value: str) -> None:
        with self._tx() as conn:
            conn.execute("INSERT INTO settings (key, value) VALUES (?, ?) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    # -- events -------------------------------------------------------------------------------

    def add_event(self, kind: str, subject: str, detail: dict[str, Any], actor: str,
                  now: float | None = None) -> int:
        with self._tx() as conn:
            cur = conn.execute(
                "INSERT INTO events (time, kind, subject, detail, actor) VALUES (?, ?, ?, ?, ?)",
                (time.time() if now is None else now, kind, subject, _dumps(detail), actor))
            return int(cur.lastrowid or 0)

    def recent_events(self, limit: int, kind: str | None = None) -> list[Event]:
        """The `limit` latest events (of one kind, if given), oldest first."""
        if kind is None:
            rows = self._read("SELECT id, time, kind, subject, detail, actor FROM events "
                              "ORDER BY id DESC LIMIT ?", (limit,))
        else:
            rows = self._read("SELECT id, time, kind, subject, detail, actor FROM events "
                              "WHERE kind = ? ORDER BY id DESC LIMIT ?", (kind, limit))
        return [Event(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in reversed(rows)]

    def events_after(self, after_id: int, limit: int) -> list[Event]:
        """Up to `limit` events with an id above `after_id`, oldest first (a primary-key
        range: cheap however long the table grows)."""
        rows = self._read("SELECT id, time, kind, subject, detail, actor FROM events "
                          "WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit))
        return [Event(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]

    # -- shards -------------------------------------------------------------------------------

    def assign_shards(self, shard_size: int, key_for: Callable[[int], str],
                      flush: bool) -> list[int]:
        """Group done results that have no shard yet, in finish order, into new shards of
        `shard_size` (and, with flush, the remainder into a last smaller one). Membership is
        decided here, in the DB, before any file exists: a shard file is then a pure function
        of DB rows. Committed durably (see the module docstring)."""
        if shard_size <= 0:
            raise ValueError("shard_size must be positive")
        created: list[int] = []
        with self._tx(durable=True) as conn:
            (seq,) = conn.execute("SELECT coalesce(max(id), 0) FROM shards").fetchone()
            now = time.time()
            while True:
                # INDEXED BY: without ANALYZE statistics SQLite picks prompts_status for
                # "status = 'done'" and sorts every done row on each call, which makes a
                # million-prompt job quadratic. The partial index holds only unsharded rows.
                rowids = [r[0] for r in conn.execute(
                    "SELECT rowid FROM prompts INDEXED BY prompts_unsharded "
                    "WHERE status = 'done' AND shard_id IS NULL "
                    "ORDER BY finished_at, rowid LIMIT ?", (shard_size,))]
                if not rowids or (len(rowids) < shard_size and not flush):
                    break
                seq += 1
                conn.execute("INSERT INTO shards (id, key, status, records, assigned_at) "
                             "VALUES (?, ?, 'assigned', ?, ?)",
                             (seq, key_for(seq), len(rowids), now))
                conn.executemany("UPDATE prompts SET shard_id = ? WHERE rowid = ?",
                                 [(seq, r) for r in rowids])
                created.append(seq)
            if created:
                crash_point("assign.mid_tx")
        return created

    def _shards(self, where: str, args: Sequence[Any] = ()) -> list[Shard]:
        return [Shard(*r) for r in self._read(
            f"SELECT {_SHARD_COLUMNS} FROM shards WHERE {where} ORDER BY id", args)]

    def shard(self, shard_id: int) -> Shard | None:
        got = self._shards("id = ?", (shard_id,))
        return got[0] if got else None

    def shards(self) -> list[Shard]:
        return self._shards("1")

    def shards_to_write(self) -> list[Shard]:
        return self._shards("status = 'assigned'")

    def shards_to_upload(self) -> list[Shard]:
        return self._shards("status = 'written'")

    def shard_lines(self, shard_id: int) -> list[ShardLine]:
        """Every prompt of the shard, by id. The stored result is used whatever the prompt's
        status: a prompt being regenerated keeps its previous line until the new one lands."""
        rows = self._read(f"SELECT {_LINE_COLUMNS} FROM prompts WHERE shard_id = ? "
                          "ORDER BY id", (shard_id,))
        return [ShardLine(r[0], json.loads(r[1]), *r[2:]) for r in rows]

    def mark_shard_written(self, shard_id: int, records: int, bytes: int, sha256: str,
                           md5: str, now: float, version: int | None = None) -> bool:
        """The shard's file is in place. With `version` (the one the writer read), nothing
        changes if the shard was reassigned meanwhile: it stays 'assigned' and is rewritten.
        Returns whether it was marked."""
        sql = ("UPDATE shards SET status = 'written', records = ?, bytes = ?, sha256 = ?, "
               "md5 = ?, written_at = ?, etag = NULL, checksum = NULL "
               "WHERE id = ? AND status = 'assigned'")
        args: list[Any] = [records, bytes, sha256, md5, now, shard_id]
        if version is not None:
            sql += " AND version = ?"
            args.append(version)
        with self._tx() as conn:
            return conn.execute(sql, args).rowcount == 1

    def mark_shard_uploaded(self, shard_id: int, etag: str | None, checksum: str | None,
                            now: float, sha256: str | None = None) -> bool:
        """Only a 'written' shard can become 'uploaded'. With `sha256` (of the bytes that were
        uploaded), nothing changes if the shard was rewritten meanwhile. Returns whether it
        was marked."""
        sql = ("UPDATE shards SET status = 'uploaded', etag = ?, checksum = ?, uploaded_at = ?, "
               "last_error = NULL WHERE id = ? AND status = 'written'")
        args: list[Any] = [etag, checksum, now, shard_id]
        if sha256 is not None:
            sql += " AND sha256 = ?"
            args.append(sha256)
        with self._tx() as conn:
            return conn.execute(sql, args).rowcount == 1

    def note_upload_failure(self, shard_id: int, error: str) -> None:
        with self._tx() as conn:
            conn.execute("UPDATE shards SET upload_attempts = upload_attempts + 1, "
                         "last_error = ? WHERE id = ?", (error, shard_id))

    def rewrite_shard(self, shard_id: int, sha256: str) -> bool:
        """A written shard whose spool file is gone or holds other bytes than `sha256` (the
        digest the DB has) goes back to 'assigned': the writer rebuilds the same bytes from the
        rows. Nothing changes if the shard moved on meanwhile. Returns whether it was reset."""
        with self._tx() as conn:
            return conn.execute(
                "UPDATE shards SET status = 'assigned', version = version + 1 "
                "WHERE id = ? AND status = 'written' AND sha256 = ?",
                (shard_id, sha256)).rowcount == 1

    def last_upload_error(self) -> tuple[str, int, str] | None:
        """(key, attempts, error) of the newest shard still waiting after a failed upload."""
        rows = self._read("SELECT key, upload_attempts, last_error FROM shards "
                          "WHERE status != 'uploaded' AND last_error IS NOT NULL "
                          "ORDER BY id DESC LIMIT 1")
        return (rows[0][0], int(rows[0][1]), rows[0][2]) if rows else None

    def upload_backlog(self) -> tuple[int, int]:
        """(shards, bytes) not uploaded yet (assigned or written)."""
        n, b = self._read("SELECT count(*), coalesce(sum(bytes), 0) FROM shards "
                          "WHERE status IN ('assigned', 'written')")[0]
        return int(n), int(b)

    def uploaded_totals(self) -> tuple[int, int]:
        n, b = self._read("SELECT count(*), coalesce(sum(bytes), 0) FROM shards "
                          "WHERE status = 'uploaded'")[0]
        return int(n), int(b)

    # -- server processes ---------------------------------------------------------------------

    def record_server_process(self, name: str, pid: int, pgid: int, argv: list[str],
                              started_at: float) -> None:
        with self._tx() as conn:
            conn.execute("INSERT OR REPLACE INTO server_processes (name, pid, pgid, argv, "
                         "started_at) VALUES (?, ?, ?, ?, ?)",
                         (name, pid, pgid, _dumps(list(argv)), started_at))

    def forget_server_process(self, name: str) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM server_processes WHERE name = ?", (name,))

    def server_processes(self) -> list[ServerProcess]:
        rows = self._read("SELECT name, pid, pgid, argv, started_at FROM server_processes "
                          "ORDER BY name")
        return [ServerProcess(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]


# Re-exported for callers that only import the store module.
__all__ = ["Store", "SHARD_ASSIGNED", "SHARD_WRITTEN", "SHARD_UPLOADED"]
