"""A consistent copy of a live state DB (SQLite's online backup), and what a copy says about
itself: whose it is, and whether it is whole.

The copy is taken from a separate read connection in one step: in WAL mode that is one read
transaction, so the daemon keeps committing while the pages are copied, and the copy is the
DB as of one instant. It is left in rollback-journal mode, one self-contained file.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from state.schema import SCHEMA_VERSION, schema_version
from state.settings_keys import Setting


class CopyError(RuntimeError):
    """A copy that is not a usable state DB; the message says why."""


@dataclass(frozen=True)
class CopyInfo:
    partition: str | None
    prompts_sha256: str | None
    schema_version: int
    total: int
    done: int


def copy_live(db_path: Path, dest: Path) -> None:
    """Copy the DB at `db_path` (which the daemon may be writing) to `dest`."""
    dest.unlink(missing_ok=True)
    src = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30.0)
    try:
        dst = sqlite3.connect(dest, isolation_level=None)
        try:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode = DELETE")
        finally:
            dst.close()
    finally:
        src.close()


def inspect(path: Path) -> CopyInfo:
    """Identity and counts of a DB copy, after SQLite's own check that it is whole."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise CopyError(f"{path}: cannot open: {exc}") from None
    try:
        (ok,) = con.execute("PRAGMA quick_check").fetchone()
        if ok != "ok":
            raise CopyError(f"{path}: damaged ({ok})")
        version = schema_version(con)
        if version > SCHEMA_VERSION:
            raise CopyError(f"{path}: schema version {version} is newer than this "
                                f"supervisor's {SCHEMA_VERSION}")
        settings = dict(con.execute("SELECT key, value FROM settings WHERE key IN (?, ?)",
                                    (Setting.JOB_PARTITION, Setting.PROMPTS_SHA256)).fetchall())
        counts = dict(con.execute("SELECT status, n FROM status_counts").fetchall())
    except sqlite3.DatabaseError as exc:
        raise CopyError(f"{path}: not a state DB ({exc})") from None
    finally:
        con.close()
    partition = settings.get(Setting.JOB_PARTITION)
    return CopyInfo(partition or None, settings.get(Setting.PROMPTS_SHA256), version,
                        sum(int(v) for v in counts.values()), int(counts.get("done", 0)))
