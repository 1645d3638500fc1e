"""One daemon per job: the lock is held by a real second process, refused with its pid, freed
the instant that process is SIGKILLed, and never inherited by the servers a daemon starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from state.job_lock import JobLock, JobLocked, holder_pid, lock_path_for

REPO = Path(__file__).resolve().parents[2]

HOLD = ("import subprocess, sys, time\n"
        "from state.job_lock import JobLock\n"
        "JobLock(sys.argv[1]).acquire()\n"
        # a child like a server: it must not keep the lock once its parent is gone
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n")


def test_a_second_holder_is_refused_with_the_first_ones_pid(tmp_path: Path):
    db = tmp_path / "job.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    child_pid = None
    try:
        child_pid = int(holder.stdout.readline())
        assert holder_pid(db) == holder.pid
        with pytest.raises(JobLocked) as exc:
            JobLock(db).acquire()
        assert str(exc.value).startswith(f"another daemon (pid {holder.pid}) runs this job")
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        # The kernel dropped the lock with its holder; the orphaned child never had it.
        assert holder_pid(db) is None
        with JobLock(db) as lock:
            assert lock.held
            assert lock_path_for(db).read_text().strip() == str(os.getpid())
            assert holder_pid(db) == os.getpid()
        assert holder_pid(db) is None
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)
        holder.stdout.close()
        if child_pid:
            try:
                os.kill(child_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_lock_file_sits_beside_the_db_and_is_kept(tmp_path: Path):
    db = tmp_path / "state" / "job.db"
    db.parent.mkdir()
    assert lock_path_for(db) == tmp_path / "state" / "job.db.lock"
    JobLock(db).acquire().release()
    assert lock_path_for(db).exists()       # never unlinked: see the module docstring
    assert holder_pid(tmp_path / "none.db") is None
