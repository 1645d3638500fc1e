"""The offline commands that write the DB (import, requeue, rebuild-state) share one ladder:
beside a running daemon, with a DB that is not there, or with one that is not SQLite, each
says so in one line and exits 2, and nothing is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from state.offline_store import OfflineRefused, offline_store
from state.store import Store
from tests.fixtures.fs_faults import assert_one_line, cli
from tests.fixtures.job_toml import job_data, write_toml

REPO = Path(__file__).resolve().parents[2]


def _commands(tmp_path: Path, db: Path) -> dict[str, list[str]]:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "one"}\n')
    data = job_data(tmp_path, servers=1, prompts=5)
    data["job"]["state"] = str(db)
    config = write_toml(tmp_path / "job.toml", data)
    return {"import": ["import", str(prompts), "--state", str(db)],
            "requeue": ["requeue", "--failed", "--state", str(db)],
            "rebuild-state": ["rebuild-state", "--config", str(config)]}


def test_each_refuses_beside_a_running_daemon_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "job.db"
    Store.open(db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from state.job_lock import JobLock; "
         "JobLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)", str(db)],
        stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "held"
        for name, args in _commands(tmp_path, db).items():
            out = cli(args)
            assert out.returncode == 2, (name, out.stderr)
            assert_one_line(out, f"dflash-supervisor {name}: another daemon (pid {holder.pid}) "
                                 "runs this job")
    finally:
        holder.kill()
        holder.wait(timeout=10)
        holder.stdout.close()
    with Store.open(db) as store:
        assert store.counts().total == 0


def test_a_db_that_is_not_sqlite_is_one_line_for_each(tmp_path: Path) -> None:
    db = tmp_path / "job.db"
    db.write_bytes(b"not a database at all, just text\n" * 200)
    for name, args in _commands(tmp_path, db).items():
        out = cli(args)
        assert out.returncode == 2, (name, out.stderr)
        assert_one_line(out, f"dflash-supervisor {name}: ", str(db))


def test_requeue_wants_the_db_to_exist_and_import_makes_it(tmp_path: Path) -> None:
    db = tmp_path / "new" / "job.db"
    with pytest.raises(OfflineRefused, match=str(db)):
        with offline_store(db):
            pass
    assert not db.exists()
    with offline_store(db, create=True) as store:
        assert store.counts().total == 0
    assert db.exists()


def test_an_os_error_inside_the_block_is_refused_the_same_way(tmp_path: Path) -> None:
    with pytest.raises(OfflineRefused) as refused:
        with offline_store(tmp_path / "job.db", create=True):
            open(tmp_path / "missing.jsonl", "rb")
    assert str(refused.value) == f"{tmp_path / 'missing.jsonl'}: No such file or directory"
