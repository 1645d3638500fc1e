"""Opening a state DB: every way it can be unusable is one line naming the path and the
problem (a directory, not SQLite, a damaged page, locked by another process, a read-only
mount, a full disk), checked on real files, real mounts and a real second process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from state.checked_open import StateDBError, integrity_problems, open_checked
from state.store import Store
from tests.fixtures.fs_faults import assert_one_line, cli, fill, tmpfs
from tests.fixtures.state_db import rows

REPO = Path(__file__).resolve().parents[2]


def _db_with_rows(path: Path, n: int = 3000) -> None:
    with Store.open(path) as store:
        store.import_batch(rows(n))
        store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def test_a_sound_db_opens_and_checks_clean(tmp_path):
    _db_with_rows(tmp_path / "job.db", 50)
    store = open_checked(tmp_path / "job.db", full_check=True)
    try:
        assert integrity_problems(store) == [] and store.counts().pending == 50
    finally:
        store.close()


def test_a_directory_and_a_missing_db(tmp_path):
    with pytest.raises(StateDBError, match="is a directory, not a state DB file"):
        open_checked(tmp_path)
    with pytest.raises(StateDBError, match="no such state DB"):
        open_checked(tmp_path / "none.db", create=False)


def test_a_file_that_is_not_sqlite(tmp_path):
    path = tmp_path / "job.db"
    path.write_bytes(b"this is a text file, not a database\n" * 200)
    with pytest.raises(StateDBError, match="the state DB is damaged.*rebuild-state"):
        open_checked(path)


def test_a_page_overwritten_is_found_before_anything_runs(tmp_path):
    path = tmp_path / "job.db"
    _db_with_rows(path)
    with Store.open(path) as store:
        (page_size,) = store._conn.execute("PRAGMA page_size").fetchone()
        (pages,) = store._conn.execute("PRAGMA page_count").fetchone()
    assert pages > 10
    with open(path, "r+b") as f:
        f.seek(page_size * (pages // 2))
        f.write(b"\xa5" * page_size)
    with pytest.raises(StateDBError) as exc:
        open_checked(path)
    assert "damaged" in str(exc.value) and str(path) in str(exc.value)


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_status_names_a_damaged_page_where_it_reads(tmp_path, json_flag):
    """`status` reads a few counters and does not check the whole file (state/checked_open.py
    says why): the damage it meets is one line, never a traceback."""
    path = tmp_path / "job.db"
    _db_with_rows(path)
    with Store.open(path) as store:
        (page_size,) = store._conn.execute("PRAGMA page_size").fetchone()
        (root,) = store._conn.execute("SELECT rootpage FROM sqlite_master "
                                      "WHERE name = 'status_counts'").fetchone()
    with open(path, "r+b") as f:
        f.seek(page_size * (root - 1))
        f.write(b"\xa5" * page_size)
    out = cli(["status", "--state", str(path), "--socket", str(tmp_path / "none.sock"),
               *json_flag])
    assert out.returncode == 2
    assert_one_line(out, "the state DB is damaged")


def test_a_db_locked_by_another_process_names_it(tmp_path):
    path = tmp_path / "job.db"
    _db_with_rows(path, 10)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sqlite3, sys, time\n"
         "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); time.sleep(60)\n",
         str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        with pytest.raises(StateDBError, match=rf"locked by another process \(pid {holder.pid}\)"):
            open_checked(path)
        assert time.monotonic() - t0 < 20      # a short probe, not the store's long wait
        # A reader (status) is not blocked by a writer.
        store = open_checked(path, probe_write=False)
        store.close()
    finally:
        holder.kill()
        holder.wait(timeout=10)
        holder.stdout.close()


def test_a_read_only_mount(tmp_path):
    mnt = tmp_path / "ro"
    with tmpfs(mnt, read_only=True):
        with pytest.raises(StateDBError) as exc:
            open_checked(mnt / "job.db")
        assert str(mnt / "job.db") in str(exc.value)
        assert "read-only" in str(exc.value) or "cannot create" in str(exc.value)


def test_an_existing_db_on_a_mount_gone_read_only(tmp_path):
    mnt = tmp_path / "m"
    with tmpfs(mnt, size="4m"):
        _db_with_rows(mnt / "job.db", 20)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True, timeout=30)
        out = cli(["import", str(REPO / "pyproject.toml"), "--state", str(mnt / "job.db")])
        assert out.returncode == 2, out.stderr
        assert_one_line(out, str(mnt / "job.db"))


def test_a_full_disk(tmp_path):
    mnt = tmp_path / "full"
    with tmpfs(mnt, size="256k"):
        fill(mnt)
        with pytest.raises(StateDBError) as exc:
            open_checked(mnt / "job.db")
        assert str(mnt / "job.db") in str(exc.value)
        assert "disk is full" in str(exc.value) or "cannot" in str(exc.value)
