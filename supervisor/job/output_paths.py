"""Where the job writes its shards, checked before anything is opened or imported: a local
`job.output` (or, for an S3 output, the local `uploads.spool_dir`) must be a directory this
process can create files in. Found any later, the same fault costs the import of a
million-line prompts file and ends as "stopped" (exit 5) at the first shard write.

Also what `dflash-supervisor check` says about the output: with no state DB yet, shard files
already in a local output are stray (an earlier job's output, or this job's with its DB
lost), and the daemon will refuse to start over them.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from supervisor.config import JobConfig
from supervisor.shards.keys import parse_shard_key, spool_dir
from supervisor.shards.verify import key_prefix
from supervisor.uploads.local_files import list_shard_files


def _key(config: JobConfig) -> str:
    return "uploads.spool_dir" if config.output_is_s3 else "job.output"


def _nearest_existing(path: Path) -> Path:
    # Bounded by the path's depth: "/" always exists.
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _write_problem(directory: Path) -> str | None:
    """Why no file can be created in `directory`, or None. A real probe file, created and
    removed: permission bits, ACLs and read-only mounts (systemd's ProtectSystem=strict makes
    everything outside the unit's own directories one) all show in it, where os.access()
    sees only the bits. (A full disk does not: the disk guard watches free space.)"""
    try:
        fd, probe = tempfile.mkstemp(prefix=".dflash-write-check-", dir=directory)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return None


def output_dir_problem(config: JobConfig) -> str | None:
    """One line naming the key, when the directory shards are written into is unusable:
    it is a file, or it (or the nearest directory it would be created in) is not writable.
    None when it is fine, or will be created where this process may create it."""
    key = _key(config)
    target = spool_dir(config)
    if os.path.lexists(target) and not target.is_dir():
        what = "a dangling symlink" if target.is_symlink() else "a file"
        return (f"{key}: {target} is {what}, not a directory; shards are written into a "
                "directory: point it at one (it is created if missing)")
    existing = _nearest_existing(target)
    if not existing.is_dir():
        what = "a dangling symlink" if existing.is_symlink() else "a file"
        return f"{key}: {target} cannot be created: {existing} is {what}, not a directory"
    why = _write_problem(existing)
    if why is None:
        return None
    user = _user()
    if existing == target:
        return f"{key}: {target}: the daemon cannot write there ({why}, as {user})"
    return (f"{key}: {target} cannot be created: the daemon cannot write in {existing} "
            f"({why}, as {user})")


def _user() -> str:
    try:
        import pwd
        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return f"uid {os.geteuid()}"


def stray_shards(config: JobConfig) -> list[str]:
    """This job's shard keys already in a local output, for a job with no state DB yet
    (then every one is stray: nothing assigned it). [] for S3 (`check` does not list a
    bucket) or when a DB exists (the daemon compares the two at start)."""
    if config.output_is_s3 or config.path(config.job.state).exists():
        return []
    prefix = key_prefix(config.job.partition)
    try:
        keys = list_shard_files(config.path(config.job.output), prefix)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            return []
        raise
    return [k for k in keys if "/" not in k[len(prefix):] and parse_shard_key(k) is not None]


def stray_shards_message(config: JobConfig, keys: list[str], config_path: str) -> str:
    n = len(keys)
    first = ", ".join(keys[:3]) + (", ..." if n > 3 else "")
    shards = "1 shard file" if n == 1 else f"{n} shard files"
    return (f"job.output: {config.path(config.job.output)} already holds {shards} named like "
            f"this job's ({first}) and the state DB {config.path(config.job.state)} does not "
            "exist yet: an earlier job's output, or this job's with its DB lost. The daemon "
            "will refuse to start over them. Point job.state at that job's DB, rebuild one "
            f"from them (`dflash-supervisor rebuild-state --config {config_path}`), or move "
            "them aside to start over")
