"""`dflash-supervisor status --state DB` only reads: a file that is not a state DB is named
and left byte for byte as it was, and a stopped job's DB is read by a user who may only read
it (the design's group auditors) in a directory that user cannot write."""

from __future__ import annotations

import grp
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from state.store import Store
from tests.fixtures.state_db import done, rows

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, user: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("DFLASH_SOCKET", None)
    return subprocess.run([*(user or []), sys.executable, "-m", "supervisor", *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd="/")


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


@pytest.mark.parametrize("content", [b"", b"id,prompt\n1,hello\n" * 50],
                         ids=["0-byte", "csv"])
@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_a_file_that_is_not_a_state_db_is_named_and_left_alone(tmp_path, content, json_flag):
    path = tmp_path / "job.db"
    path.write_bytes(content)
    r = cli("status", "--state", str(path), "--socket", str(tmp_path / "none.sock"),
            *json_flag)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], r.stderr
    assert r.stdout == ""           # no heading that promises a status from it
    assert ("empty file" in lines[0]) if not content else ("not a SQLite" in lines[0])
    assert path.read_bytes() == content
    assert _siblings(path) == ["job.db"]


def test_a_db_from_an_older_version_is_read_and_not_migrated(tmp_path):
    from state.schema import SCHEMA_VERSION, migrate, schema_version
    path = tmp_path / "job.db"
    con = sqlite3.connect(path, isolation_level=None)
    migrate(con, SCHEMA_VERSION - 1)
    con.execute("INSERT INTO prompts (id, messages) VALUES ('a', '[]')")
    con.execute("UPDATE status_counts SET n = 1 WHERE status = 'pending'")
    con.close()
    before = path.read_bytes()
    r = cli("status", "--state", str(path), "--socket", str(tmp_path / "none.sock"))
    assert r.returncode == 0, r.stderr
    assert "prompts  1: 0 done (0.0%), 1 pending" in r.stdout
    assert path.read_bytes() == before
    con = sqlite3.connect(path)
    assert schema_version(con) == SCHEMA_VERSION - 1
    con.close()


# -- the group auditor: nobody, in the DB directory's group only ------------------------------

def _free_gid() -> int:
    for gid in range(47_000, 48_000):
        try:
            grp.getgrgid(gid)
        except KeyError:
            return gid
    raise RuntimeError("no free gid")


@pytest.fixture
def auditor_dir() -> Iterator[tuple[Path, list[str]]]:
    """A 0750 directory of a group `nobody` is given (and nothing else), under a directory
    anyone may traverse; the command prefix that runs as that auditor."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a command as nobody")
    gid = _free_gid()
    top = Path(tempfile.mkdtemp(prefix="dflash-auditor-"))
    try:
        top.chmod(0o755)
        job = top / "job"
        job.mkdir()
        os.chown(job, 0, gid)
        job.chmod(0o750)
        user = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--groups", str(gid)]
        yield job, user
    finally:
        shutil.rmtree(top)


def _readable_to_group(job: Path, gid: int) -> None:
    for p in job.iterdir():
        os.chown(p, 0, gid)
        p.chmod(0o640)


def test_the_auditor_cannot_write_the_directory(auditor_dir):
    job, user = auditor_dir
    r = subprocess.run([*user, "touch", str(job / "x")], capture_output=True, text=True)
    assert r.returncode != 0      # the premise of the tests below


@pytest.mark.slow
def test_a_stopped_daemons_db_is_read_by_a_group_auditor(auditor_dir):
    """The daemon's clean stop leaves the DB without -wal/-shm, in a journal mode a reader
    without write access opens; status and the audit views read it as nobody."""
    from tests.fixtures import control_daemon as daemon
    job, user = auditor_dir
    d = daemon.start(job / "run", servers=1, ready=False)
    d.wait_status(lambda s: s.job.done > 0, "a first result")
    assert d.stop() == 0
    db = d.db
    assert not db.with_name(db.name + "-wal").exists()
    assert not db.with_name(db.name + "-shm").exists()
    gid = job.stat().st_gid
    os.chown(db.parent, 0, gid)
    db.parent.chmod(0o750)
    _readable_to_group(db.parent, gid)
    before = db.read_bytes()

    r = cli("status", "--state", str(db), user=user)
    assert r.returncode == 0, r.stderr
    assert "prompts  20000:" in r.stdout
    r = cli("status", "--state", str(db), "--json", user=user)
    assert r.returncode == 0, r.stderr
    assert '"total": 20000' in r.stdout
    for view in ("audit_progress", "audit_truncation", "audit_waste", "audit_restarts"):
        q = subprocess.run([*user, "sqlite3", str(db), f"SELECT * FROM {view}"],
                           capture_output=True, text=True, timeout=30)
        assert q.returncode == 0 and not q.stderr, (view, q.stderr)
    q = subprocess.run([*user, "sqlite3", str(db), "SELECT sum(prompts) FROM audit_progress"],
                       capture_output=True, text=True, timeout=30)
    assert q.stdout.strip() == "20000"
    assert db.read_bytes() == before


def test_an_offline_commands_db_is_read_by_a_group_auditor(auditor_dir):
    """Any writer that closes cleanly (import, requeue, rebuild-state) leaves it readable."""
    from state.offline_store import offline_store
    job, user = auditor_dir
    db = job / "job.db"
    with offline_store(db, create=True) as store:
        store.import_batch(rows(5))
        ids = [c.id for c in store.claim(2, "gpu0", 1.0)]
        store.record([done(ids[0], 2.0, finish="length"), done(ids[1], 2.0)])
    _readable_to_group(job, job.stat().st_gid)
    r = cli("status", "--state", str(db), user=user)
    assert r.returncode == 0, r.stderr
    assert "prompts  5: 2 done (40.0%), 3 pending" in r.stdout
    assert "truncated 1: 1 long, 0 looping" in r.stdout


def test_a_wal_mode_db_closed_by_an_older_version_is_read_and_nothing_is_left_beside(
        auditor_dir):
    """A plain close leaves the file in WAL mode with no -wal (what versions before the
    clean-stop checkpoint left): read as immutable, by the auditor, and by root with no
    -wal/-shm made beside it."""
    job, user = auditor_dir
    db = job / "job.db"
    with Store.open(db) as store:
        store.import_batch(rows(4))
    assert db.read_bytes()[18] == 2 and _siblings(db) == ["job.db"]
    _readable_to_group(job, job.stat().st_gid)
    for who in (user, None):
        r = cli("status", "--state", str(db), "--socket", "/nonexistent/none.sock", user=who)
        assert r.returncode == 0, r.stderr
        assert "prompts  4: 0 done (0.0%), 4 pending" in r.stdout
        assert _siblings(db) == ["job.db"]


def test_a_killed_writers_db_is_read_by_a_group_auditor(auditor_dir):
    """SIGKILL leaves -wal and -shm beside the DB; with them group-readable, SQLite's
    read-only -shm lets the auditor read the last commits too."""
    job, user = auditor_dir
    db = job / "job.db"
    script = ("import os, sys; from state.store import Store; "
              "from tests.fixtures.state_db import rows; "
              f"s = Store.open({str(db)!r}); s.import_batch(rows(6)); "
              "os.kill(os.getpid(), 9)")
    killed = subprocess.run([sys.executable, "-c", script], cwd=REPO, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert killed.returncode == -9
    assert _siblings(db) == ["job.db", "job.db-shm", "job.db-wal"]
    _readable_to_group(job, job.stat().st_gid)
    r = cli("status", "--state", str(db), "--socket", "/nonexistent/none.sock", user=user)
    assert r.returncode == 0, r.stderr
    assert "prompts  6: 0 done (0.0%), 6 pending" in r.stdout


def test_a_wal_the_auditor_cannot_read_is_one_line(auditor_dir):
    """A -wal with no -shm beside it, in a directory the auditor cannot write: SQLite cannot
    read it, and status says what is left to do."""
    job, user = auditor_dir
    db = job / "job.db"
    script = ("import os; from state.store import Store; "
              "from tests.fixtures.state_db import rows; "
              f"s = Store.open({str(db)!r}); s.import_batch(rows(3)); os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", script], cwd=REPO, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    db.with_name("job.db-shm").unlink()
    _readable_to_group(job, job.stat().st_gid)
    r = cli("status", "--state", str(db), "--socket", "/nonexistent/none.sock", user=user)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "in WAL mode" in lines[0] and str(db) in lines[0], r.stderr
