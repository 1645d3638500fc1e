"""Real filesystem faults for tests: a tiny tmpfs that fills up, a read-only mount, and running
a command without root's file-permission override (root reads a mode-000 file otherwise). Each skips the
test where the machine does not allow it (no root, no mount)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import pytest

from tests.support import REPO


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@contextmanager
def tmpfs(path: Path, size: str = "1m", read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of `size` at `path` (read-only when asked), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    got = _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {got.stderr.strip()}")
    try:
        if read_only:
            ro = _mount("-o", "remount,ro", str(path))
            if ro.returncode != 0:
                pytest.skip(f"cannot remount read-only: {ro.stderr.strip()}")
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(directory: Path) -> None:
    """Write until the filesystem under `directory` is full (bounded by its size)."""
    with open(directory / "filler", "wb") as f:
        chunk = b"\0" * 65536
        for _ in range(1 << 16):
            try:
                f.write(chunk)
                f.flush()
            except OSError:
                return


def cli(args: Sequence[str], *, no_file_override: bool = False, cwd: Path | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    """`dflash-supervisor ARGS` in a child process. With `no_file_override`, root's power to
    read and write any file is dropped (setpriv), so mode bits bind it as they bind a
    service user; for any other user they bind already."""
    prefix: list[str] = []
    if no_file_override and os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv is needed to drop root's file-permission override")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([*prefix, sys.executable, "-m", "supervisor", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd or REPO,
                          env=env)


def assert_one_line(out: subprocess.CompletedProcess, *fragments: str) -> None:
    """The error is one line on stderr naming the problem; no traceback."""
    err = out.stderr.strip()
    assert "Traceback" not in err, err
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
