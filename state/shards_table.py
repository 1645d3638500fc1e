"""The `shards` table: shard membership, written files, uploads."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from state.connection import StoreConnection
from state.crash_points import crash_point
from state.records import Completion, Shard, ShardLine
from state.token_ids_table import unpack_ids

_SHARD_COLUMNS = ("id, key, status, records, bytes, sha256, md5, etag, checksum, written_at, "
                  "uploaded_at, upload_attempts, last_error, version")

_LINE_COLUMNS = ("id, messages, content, reasoning_content, finish_reason, prompt_tokens, "
                 "completion_tokens, reasoning_tokens, max_tokens, model, server, attempts, "
                 "finished_at, loop, continued_from")
# The sampled output ids, for shard lines that carry them (job.shard_output_ids).
_IDS_JOIN = " LEFT JOIN answer_tokens t ON t.prompt_id = prompts.id"


def _line(r: tuple) -> ShardLine:
    return ShardLine(r[0], json.loads(r[1]), Completion(*r[2:8]), r[8], r[9], r[10],
                     r[11], r[12], loop=None if r[13] is None else bool(r[13]), continued_from=r[14],
                     output_ids=unpack_ids(r[15]) if len(r) > 15 and r[15] is not None
                     else None)


class ShardsTable(StoreConnection):
    """Shard assignment (durable), the lines of a shard, and each shard's written/uploaded marks."""

    def assign_shards(self, shard_size: int, key_for: Callable[[int], str],
                      flush: bool) -> list[int]:
        """Group done results that have no shard yet, in finish order, into new shards of
        `shard_size` (and, with flush, the remainder into a last smaller one). Membership is
        decided here, in the DB, before any file exists: a shard file is then a pure function
        of DB rows. Committed durably (see state/store.py)."""
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

    def shard_lines(self, shard_id: int, output_ids: bool = False) -> list[ShardLine]:
        """Every prompt of the shard, by id. The stored result is used whatever the prompt's
        status: a prompt being regenerated keeps its previous line until the new one lands.
        With `output_ids`, each line carries its answer's stored output ids."""
        ids, join = (", t.output_ids", _IDS_JOIN) if output_ids else ("", "")
        rows = self._read(f"SELECT {_LINE_COLUMNS}{ids} FROM prompts{join} WHERE shard_id = ? "
                          "ORDER BY id", (shard_id,))
        return [_line(r) for r in rows]

    def shard_line_batches(self, shard_id: int, size: int,
                           output_ids: bool = False) -> Iterator[list[ShardLine]]:
        """`shard_lines` in batches of `size` lines, each its own read (by id, after the
        last one read), so a whole shard's answers are never in memory at once. A prompt
        regenerated between two reads bumps the shard's version: the writer's
        `mark_shard_written(version=...)` then refuses the file, and it is written again."""
        after = ""
        ids, join = (", t.output_ids", _IDS_JOIN) if output_ids else ("", "")
        while True:
            rows = self._read(f"SELECT {_LINE_COLUMNS}{ids} FROM prompts{join} WHERE shard_id = ? "
                              "AND id > ? ORDER BY id LIMIT ?", (shard_id, after, size))
            if rows:
                yield [_line(r) for r in rows]
            if len(rows) < size:
                return
            after = rows[-1][0]

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
        return self.upload_totals()[0]

    def uploaded_totals(self) -> tuple[int, int]:
        return self.upload_totals()[1]

    def upload_totals(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """((shards, bytes) waiting, (shards, bytes) uploaded), read in one statement: two
        reads could straddle an upload's commit and show a shard in both or in neither."""
        row = self._read(
            "SELECT coalesce(sum(status IN ('assigned', 'written')), 0), "
            "coalesce(sum(CASE WHEN status IN ('assigned', 'written') THEN bytes END), 0), "
            "coalesce(sum(status = 'uploaded'), 0), "
            "coalesce(sum(CASE WHEN status = 'uploaded' THEN bytes END), 0) FROM shards")[0]
        return (int(row[0]), int(row[1])), (int(row[2]), int(row[3]))
