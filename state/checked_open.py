"""Opening a state DB so that every way it can go wrong is one line naming the problem.

A directory, a read-only location, a file that is not SQLite, a damaged page, another process
holding a write lock, a full disk: each becomes `StateDBError` with a message an operator can
act on, never a sqlite3 traceback. `PRAGMA quick_check` runs on every open (it reads every
page but skips the index cross-checks, a few seconds per GB), `integrity_check` on demand:
a damaged DB must stop the daemon, not run on and finish "as if nothing happened".

`open_for_reading` is the reader's (`status`): it writes nothing, and it skips quick_check,
which reads every page (10 s for a 3.4 GB DB, minutes for a finished job's 11 GB) to show
a few counters; `verify --integrity` and every daemon start still check the whole file.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from state.schema import SchemaError
from state.store import Store

RECOVERY_HINT = ("restore the DB from a backup, or move it aside and rebuild it from the "
                 "output with `dflash-supervisor rebuild-state`")


class StateDBError(RuntimeError):
    """The state DB cannot be used; the message says why and names the path."""


def _lock_holder(path: Path) -> str:
    """' (pid N)' for the process holding a POSIX lock on the DB file, from /proc/locks."""
    try:
        ino = os.stat(path).st_ino
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            for line in f:
                parts = line.split()
                # "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
                if len(parts) >= 6 and parts[1] == "POSIX" and parts[5].endswith(f":{ino}"):
                    return f" (pid {parts[4]})"
    except OSError:
        pass
    return ""


def _explain(path: Path, exc: BaseException) -> str:
    text = str(exc)
    low = text.lower()
    if isinstance(exc, SchemaError):
        return f"{path}: {text}"
    if "locked" in low or "busy" in low:
        return f"{path}: locked by another process{_lock_holder(path)}; stop it first"
    if "readonly" in low or "read-only" in low:
        return f"{path}: cannot write here (read-only location or file)"
    if "disk is full" in low or getattr(exc, "errno", None) == errno.ENOSPC:
        return f"{path}: the disk is full"
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return f"{path}: the state DB is damaged ({text}); {RECOVERY_HINT}"
    if "unable to open" in low:
        parent = path.parent
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"{path}: cannot create or open it (no write access to {parent})"
        return f"{path}: cannot open it ({text})"
    return f"{path}: {text}"


SQLITE_HEADER = b"SQLite format 3\x00"


def _reader_explain(path: Path, exc: BaseException) -> str:
    low = str(exc).lower()
    if "unable to open" in low and not os.access(path.parent, os.W_OK | os.X_OK):
        # A WAL-mode file with a -wal needs its -shm beside it (readable, or made by the
        # first reader); one without is read as immutable (state/connection.py).
        return (f"{path}: in WAL mode, and this user can neither read its -shm file nor "
                f"create one in {path.parent}: read it with write access there, or after "
                "the daemon's clean stop")
    return _explain(path, exc)


def read_error(path: Path, exc: BaseException) -> str:
    """A reader's query failing (a damaged page where it read), as one line."""
    return _reader_explain(path, exc)


def open_for_reading(path: str | Path) -> Store:
    """The Store read-only (state/connection.py open_readonly), or StateDBError naming the
    problem: missing, a directory, unreadable, empty, not SQLite, no state DB schema, a
    newer schema, damaged where the first read lands."""
    path = Path(path)
    if path.is_dir():
        raise StateDBError(f"{path}: is a directory, not a state DB file")
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        raise StateDBError(f"{path}: no such state DB") from None
    except PermissionError:
        raise StateDBError(f"{path}: not readable by this user") from None
    except OSError as exc:
        raise StateDBError(f"{path}: cannot read it ({exc.strerror})") from None
    if not head:
        raise StateDBError(f"{path}: empty file (0 bytes), not a state DB")
    if head != SQLITE_HEADER:
        raise StateDBError(f"{path}: not a SQLite database, so not a state DB")
    try:
        return Store.open_readonly(path)
    except (sqlite3.Error, SchemaError, OSError) as exc:
        raise StateDBError(_reader_explain(path, exc)) from None


def integrity_problems(store: Store, full: bool = False) -> list[str]:
    """What SQLite's own check finds wrong ([] when the DB is sound)."""
    pragma = "integrity_check" if full else "quick_check"
    with store._lock:
        rows = store._conn.execute(f"PRAGMA {pragma}(20)").fetchall()
    found = [str(r[0]) for r in rows]
    return [] if found == ["ok"] else found


def _probe_write_lock(store: Store, wait_s: float = 2.0) -> None:
    """Take and drop the write lock once: in WAL mode a reader opens fine beside another
    process's open write transaction, and the daemon would only find out at its first write,
    after Store's long busy timeout, deep inside a task."""
    with store._lock:
        conn = store._conn
        (previous,) = conn.execute("PRAGMA busy_timeout").fetchone()
        conn.execute(f"PRAGMA busy_timeout = {int(wait_s * 1000)}")
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(previous)}")


def open_checked(path: str | Path, *, create: bool = True, full_check: bool = False,
                 probe_write: bool = True) -> Store:
    """The Store, checked (quick_check, or integrity_check with `full_check`), or
    StateDBError. With `create` False a missing file is an error rather than a new DB;
    with `probe_write` False (a reader beside a live daemon) the write lock is not tried."""
    path = Path(path)
    if path.is_dir():
        raise StateDBError(f"{path}: is a directory, not a state DB file")
    if not path.exists():
        if not create:
            raise StateDBError(f"{path}: no such state DB")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateDBError(f"{path}: cannot create its directory: {exc.strerror}") from None
    elif not os.access(path, os.R_OK):
        raise StateDBError(f"{path}: not readable by this user")
    try:
        store = Store.open(path)
    except (sqlite3.Error, SchemaError, OSError) as exc:
        raise StateDBError(_explain(path, exc)) from None
    try:
        if probe_write:
            _probe_write_lock(store)
        problems = integrity_problems(store, full_check)
    except sqlite3.Error as exc:
        store.close()
        raise StateDBError(_explain(path, exc)) from None
    if problems:
        store.close()
        # SQLite's check lines may span lines ("*** in database main ***\nPage 56: ..."):
        # the error stays one line.
        said = "; ".join(" ".join(p.split()) for p in problems[:3])
        raise StateDBError(f"{path}: the state DB is damaged ({said}); "
                           f"{RECOVERY_HINT}")
    return store
