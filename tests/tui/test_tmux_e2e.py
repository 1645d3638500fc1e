"""As a person uses it: `dflash-supervisor demo --tui` in a real terminal (tmux), the screen
read with capture-pane, keys sent with send-keys, then quit; the demo's daemon and servers
are gone afterwards. Also checks the 80x24 layout by resizing the terminal mid-run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.fixtures.waiting import wait_until

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
REPO = Path(__file__).resolve().parents[2]


class Terminal:
    def __init__(self, name: str) -> None:
        self.name = name

    def tmux(self, *args: str) -> str:
        # A tmux server of its own (-L): on a shared machine another user's `tmux -t NAME`
        # matches sessions by prefix, and could resize this window or type into it.
        return subprocess.run(["tmux", "-L", self.name, *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name).rstrip("\n")

    def keys(self, *keys: str) -> None:
        for key in keys:
            self.tmux("send-keys", "-t", self.name, key)
            time.sleep(0.15)

    def wait_for(self, check: Callable[[str], object], what: str, timeout_s: float = 30.0) -> str:
        def passing() -> str | None:
            text = self.screen()
            return text if check(text) else None
        return wait_until(passing, what, timeout_s, poll_s=0.1, seen=self.screen)


@pytest.fixture
def term(tmp_path: Path) -> Iterator[Terminal]:
    # The pid keeps two test runs (or workers) apart; the name is also the tmux server's.
    name = f"dflash-e2e-{os.getpid()}-{tmp_path.name}"[:60]
    t = Terminal(name)
    cmd = (f"cd {tmp_path} && {sys.executable} -m supervisor demo --tui --dir {tmp_path / 'demo'}"
           f" --prompts 50000; echo DEMO-EXIT=$?; sleep 600")
    t.tmux("new-session", "-d", "-s", name, "-x", "100", "-y", "30", cmd)
    try:
        yield t
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True, timeout=10)
        # Nothing the demo started may outlive the test (its servers' command lines do not
        # name the directory: take the daemon's whole tree).
        for p in psutil.process_iter(["cmdline"]):
            if str(tmp_path) in " ".join(p.info["cmdline"] or ()):
                try:
                    tree = [p, *p.children(recursive=True)]
                except psutil.NoSuchProcess:
                    continue
                for q in tree:
                    try:
                        q.kill()
                    except psutil.NoSuchProcess:
                        pass


def test_demo_tui_in_a_terminal(term: Terminal) -> None:
    screen = term.wait_for(lambda s: "● live" in s and s.count("READY") >= 3,
                           "the TUI attached with three READY servers", timeout_s=60)
    pid = int(re.search(r"pid (\d+)", screen).group(1))       # the demo daemon's pid
    assert psutil.pid_exists(pid)
    for region in ("req/s", "max tokens 4,096", "server  state", "uploads", "events",
                   "q quit"):
        assert region in screen, region

    term.keys("m")
    term.wait_for(lambda s: "Max tokens" in s and "8192" in s, "the max tokens dialog")
    term.keys("Enter")
    # The events panel shows the newest few lines, and the demo's loop aborts come about
    # one a second: under load the raise's event can scroll by between two captures that
    # also show the new job line. Each must be seen on some screen, as a person watching
    # would have seen it; not necessarily both on the same one.
    seen: set[str] = set()

    def raised(s: str) -> bool:
        seen.update(w for w in ("max tokens 8,192", "max tokens 4096 → 8192") if w in s)
        # The operator's own action, also an event: its record lands after the effect's, and
        # loop aborts can push the effect's line out before a capture sees it (CI, loaded).
        if "asked: max-tokens value=8192" in s:
            seen.add("max tokens 4096 → 8192")
        return len(seen) == 2
    term.wait_for(raised, "the new limit in the job line and the events")

    term.keys("p")
    term.wait_for(lambda s: "Pause dispatch" in s, "the pause dialog")
    term.keys("Enter")
    term.wait_for(lambda s: "PAUSED by operator" in s and "PAUSED (operator)" not in s, "the pause banner")
    term.keys("p")
    term.wait_for(lambda s: "Resume dispatch?" in s, "the resume question")
    term.keys("Enter")          # Enter does what a confirm dialog offers
    term.wait_for(lambda s: "p pause" in s.splitlines()[-1] and "PAUSED" not in s,
                  "the banner gone and p offered to pause again")

    term.keys("?")
    term.wait_for(lambda s: "dflash-tui keys" in s, "the help screen")
    term.keys("Escape")

    # The tuner's screen: what the search does (or that none runs), and back.
    term.keys("T")
    tuning = term.wait_for(lambda s: "Tuning: the canary search" in s and "esc back" in s,
                           "the tuning screen")
    assert "no trials yet" in tuning or "#" in tuning, tuning
    term.keys("Escape")
    term.wait_for(lambda s: "server  state" in s, "the main screen again")

    term.tmux("resize-window", "-t", term.name, "-x", "80", "-y", "24")
    # Until the TUI has redrawn for the new size (tmux shows the old frame cropped first).
    small = term.wait_for(lambda s: len(s.splitlines()) <= 24 and "gpu2" in s
                          and s.startswith(" dflash-supervisor") and "last exit" in s,
                          "the 80x24 layout")
    for region in ("dflash-supervisor", "ETA", "gpu0", "gpu1", "gpu2", "uploads", "q quit"):
        assert region in small, f"{region} missing at 80x24:\n{small}"
    assert all(len(line) <= 80 for line in small.splitlines())
    # The server table keeps every row, its uptime whole and the exit reason's column.
    header = next(line for line in small.splitlines() if line.startswith(" server  state"))
    assert " up " in header and header.rstrip().endswith("last exit"), small
    for row in (line for line in small.splitlines() if re.match(r" gpu\d ", line)):
        assert re.search(r" \d+m\d\ds  | \d+s  ", row), row

    term.keys("?")
    # Its last line, whole (the actions' notices may cover it for their few seconds).
    helped = term.wait_for(lambda s: "audit trail, with your user name." in s,
                           "the help at 80x24, unwrapped")
    assert "quit and end the demo" in helped and "keeps running" not in helped
    term.keys("Escape")

    daemon = psutil.Process(pid)
    servers = daemon.children(recursive=True)
    assert len(servers) >= 3
    term.keys("q")
    term.wait_for(lambda s: "DEMO-EXIT=0" in s, "the demo to exit", timeout_s=90)
    # Quitting the TUI stopped the demo: its daemon and every server process are gone.
    gone, alive = psutil.wait_procs([daemon] + servers, timeout=10)
    assert alive == []


def test_closing_the_terminal_stops_the_demo(term: Terminal) -> None:
    screen = term.wait_for(lambda s: "● live" in s and s.count("READY") >= 3,
                           "the TUI attached with three READY servers", timeout_s=60)
    daemon = psutil.Process(int(re.search(r"pid (\d+)", screen).group(1)))
    tree = [daemon, *daemon.children(recursive=True)]
    term.tmux("kill-session", "-t", term.name)        # as an SSH session dropping
    gone, alive = psutil.wait_procs(tree, timeout=60)
    assert alive == []
