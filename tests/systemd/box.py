"""A real systemd to install the unit under: ../shared/tools/systemd-box (systemd as PID 1 in a
systemd-nspawn container), driven from a test.

Each Box has its own state directory (its own pid file and machine name), so tests and a box
someone booted by hand never touch each other; the Debian root the tool caches is shared
read-only (every boot is a volatile overlay on it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

REPO = Path(__file__).resolve().parents[2]



def _find_tool() -> Path:
    """../shared/tools/systemd-box beside the checkout (or beside a folder holding it, as for a
    git worktree), unless $SYSTEMD_BOX names it."""
    if os.environ.get("SYSTEMD_BOX"):
        return Path(os.environ["SYSTEMD_BOX"])
    for folder in REPO.parents:
        candidate = folder / "shared" / "tools" / "systemd-box"
        if candidate.exists():
            return candidate
    return REPO.parent / "shared" / "tools" / "systemd-box"


TOOL = _find_tool()
SHARED_ROOT = Path(os.environ.get("SYSTEMD_BOX_DIR", "/var/tmp/systemd-box")) / "rootfs"


def why_not_runnable() -> str | None:
    """Why a box cannot run here (the test skips with this), or None."""
    if not TOOL.exists():
        return f"{TOOL} not found"
    if os.geteuid() != 0:
        return "systemd-box needs root (nspawn)"
    if shutil.which("systemd-nspawn") is None and shutil.which("apt-get") is None:
        return "no systemd-nspawn and no apt-get to install it"
    return None


class Box:
    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir = state_dir
        if SHARED_ROOT.joinpath("usr/lib/systemd/systemd").exists():
            (state_dir / "rootfs").symlink_to(SHARED_ROOT)
            self.env = {**os.environ, "SYSTEMD_BOX_DIR": str(state_dir)}
        else:
            # First boot on this machine: let the tool build its cached root where it keeps it.
            self.env = {**os.environ, "SYSTEMD_BOX_DIR": str(SHARED_ROOT.parent)}
        self.env["SYSTEMD_BOX_NAME"] = f"dflash-test-{os.getpid()}"
        self._root: Path | None = None

    def _tool(self, *args: str, timeout: float = 60, check: bool = True
              ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([str(TOOL), *args], env=self.env, capture_output=True, text=True,
                             timeout=timeout)
        if check and out.returncode != 0:
            raise AssertionError(f"systemd-box {' '.join(args)}: exit {out.returncode}: "
                                 f"{out.stderr.strip()} {out.stdout.strip()}")
        return out

    def up(self, *paths: Path) -> None:
        self._tool("up", *map(str, paths), timeout=600)
        self._root = Path(self._tool("root").stdout.strip())

    def down(self) -> None:
        self._tool("down", timeout=120, check=False)

    @property
    def root(self) -> Path:
        """The box's / as seen from here (read and write files through it)."""
        assert self._root is not None, "not up"
        return self._root

    def sh(self, *argv: str, timeout: float = 120, check: bool = True
           ) -> subprocess.CompletedProcess[str]:
        return self._tool("exec", *argv, timeout=timeout, check=check)

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.sh("systemctl", "show", unit, *(f"--property={p}" for p in props))
        return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)

    def journal(self, unit: str) -> str:
        return self.sh("journalctl", "--no-pager", "-o", "cat", "-u", unit).stdout

    def wait(self, condition: Callable[[], bool], what: str, timeout_s: float = 60,
             poll_s: float = 0.5) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(poll_s)
        raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")

    def pids_of(self, user: str) -> Sequence[str]:
        out = self.sh("pgrep", "-u", user, "-a", check=False)
        return [line for line in out.stdout.splitlines() if line.strip()]
