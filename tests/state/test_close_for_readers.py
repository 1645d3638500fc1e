"""A writer's clean close leaves the DB in rollback-journal mode with no -wal/-shm beside it
(what a reader without write access to the directory needs), waiting briefly for another
connection to let go, and saying so in one log line when one does not."""

from __future__ import annotations

import logging
import sqlite3
import threading

from state.store import Store
from tests.fixtures.state_db import rows


def _mode(path) -> str:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(con.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        con.close()


def _beside(path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name))


def test_a_clean_close_checkpoints_and_leaves_wal(tmp_path):
    path = tmp_path / "job.db"
    store = Store.open(path)
    store.import_batch(rows(50))
    assert _beside(path) == ["job.db", "job.db-shm", "job.db-wal"]
    store.close_for_readers()
    assert _beside(path) == ["job.db"]
    assert _mode(path) == "delete"
    with Store.open(path) as again:          # the next writer is back in WAL, rows intact
        assert again.counts().pending == 50
        assert again._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_it_waits_for_a_reader_that_lets_go(tmp_path):
    path = tmp_path / "job.db"
    store = Store.open(path)
    store.import_batch(rows(5))
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    reader.execute("SELECT count(*) FROM prompts").fetchall()
    threading.Timer(0.3, reader.close).start()
    store.close_for_readers()
    assert _beside(path) == ["job.db"] and _mode(path) == "delete"


def test_a_reader_that_stays_leaves_it_in_wal_with_one_line(tmp_path, caplog):
    path = tmp_path / "job.db"
    store = Store.open(path)
    store.import_batch(rows(5))
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        reader.execute("SELECT count(*) FROM prompts").fetchall()
        with caplog.at_level(logging.WARNING, logger="state.connection"):
            store.close_for_readers()
        assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert reader.execute("SELECT count(*) FROM prompts").fetchone()[0] == 5
    finally:
        reader.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "left in WAL mode" in lines[0] and str(path) in lines[0]
