"""The scratch ledger of `dflash-supervisor verify`: which prompt ids the prompt file promises
(and to which partition), and which ids the shards hold (and in which shard).

Millions of ids do not fit a set in constant memory, and a sort would be hand-written
external sorting; a throw-away SQLite file does both with bounded memory (its page cache).
It is not the job's state DB and is deleted after the run. Durability is off on purpose:
a crash only loses the scratch file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Small on purpose: the main file and each temporary b-tree of the GROUP BY queries get a
# cache this size; at 32 MiB peak memory still grew from 100k to 1M lines, at 8 MiB it is
# flat (benchmarks/bench_verify.py), for about a third less speed.
CACHE_KIB = 8 * 1024


@dataclass(frozen=True)
class Sample:
    count: int
    first: tuple[str, ...]      # a few examples, by id


class VerifyLedger:
    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None)
        c = self._conn
        c.execute("PRAGMA journal_mode = OFF")
        c.execute("PRAGMA synchronous = OFF")
        c.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        c.execute("PRAGMA temp_store = FILE")
        c.execute("CREATE TABLE expected (id TEXT PRIMARY KEY, part INTEGER NOT NULL) "
                  "WITHOUT ROWID")
        # part: the partition named by the shard's key (NULL for an unpartitioned key).
        c.execute("CREATE TABLE seen (id TEXT NOT NULL, shard TEXT NOT NULL, part INTEGER)")
        self._indexed = False

    def close(self) -> None:
        self._conn.close()

    def add_expected(self, rows: Sequence[tuple[str, int]]) -> int:
        """Returns how many were new (an id repeated in the prompt file is imported once)."""
        with self._conn:
            self._conn.execute("BEGIN")
            before = self._conn.total_changes
            self._conn.executemany("INSERT OR IGNORE INTO expected VALUES (?, ?)", rows)
            return self._conn.total_changes - before

    def add_seen(self, rows: Sequence[tuple[str, str, int | None]]) -> None:
        with self._conn:
            self._conn.execute("BEGIN")
            self._conn.executemany("INSERT INTO seen VALUES (?, ?, ?)", rows)

    def _index(self) -> None:
        if not self._indexed:
            # Built once after the bulk insert: cheaper than keeping it up to date per row.
            self._conn.execute("CREATE INDEX seen_id ON seen (id)")
            self._indexed = True

    def _sample(self, count_sql: str, ids_sql: str, limit: int) -> Sample:
        self._index()
        (count,) = self._conn.execute(count_sql).fetchone()
        first = tuple(r[0] for r in self._conn.execute(ids_sql + " LIMIT ?", (limit,)))
        return Sample(int(count), first)

    def expected_total(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM expected").fetchone()[0])

    def present_once(self) -> int:
        self._index()
        return int(self._conn.execute(
            "SELECT count(*) FROM (SELECT s.id FROM seen s JOIN expected e ON e.id = s.id "
            "GROUP BY s.id HAVING count(*) = 1)").fetchone()[0])

    def missing_by_partition(self, limit: int = 5) -> dict[int, Sample]:
        self._index()
        out: dict[int, Sample] = {}
        rows = self._conn.execute(
            "SELECT part, count(*) FROM expected e WHERE NOT EXISTS "
            "(SELECT 1 FROM seen s WHERE s.id = e.id) GROUP BY part ORDER BY part").fetchall()
        for part, count in rows:
            first = tuple(r[0] for r in self._conn.execute(
                "SELECT id FROM expected e WHERE part = ? AND NOT EXISTS "
                "(SELECT 1 FROM seen s WHERE s.id = e.id) ORDER BY id LIMIT ?", (part, limit)))
            out[int(part)] = Sample(int(count), first)
        return out

    def duplicated(self, limit: int = 5) -> Sample:
        """Ids in more than one line (in one shard or across shards)."""
        return self._sample(
            "SELECT count(*) FROM (SELECT id FROM seen GROUP BY id HAVING count(*) > 1)",
            "SELECT id || ' (' || count(*) || 'x: ' || group_concat(shard, ', ') || ')' "
            "FROM seen GROUP BY id HAVING count(*) > 1 ORDER BY id", limit)

    def unexpected(self, limit: int = 5) -> Sample:
        """Ids in the shards that the prompt file does not have."""
        return self._sample(
            "SELECT count(DISTINCT id) FROM seen s WHERE NOT EXISTS "
            "(SELECT 1 FROM expected e WHERE e.id = s.id)",
            "SELECT DISTINCT id || ' (' || shard || ')' FROM seen s WHERE NOT EXISTS "
            "(SELECT 1 FROM expected e WHERE e.id = s.id) ORDER BY id", limit)

    def misplaced(self, limit: int = 5) -> Sample:
        """Ids in a partition's shard that the stable hash gives to another partition."""
        return self._sample(
            "SELECT count(*) FROM seen s JOIN expected e ON e.id = s.id "
            "WHERE s.part IS NOT NULL AND s.part != e.part",
            "SELECT s.id || ' (' || s.shard || ', belongs to ' || e.part || ')' "
            "FROM seen s JOIN expected e ON e.id = s.id "
            "WHERE s.part IS NOT NULL AND s.part != e.part ORDER BY s.id", limit)
