"""dflash-tui's cost while attached to a busy daemon, as a person runs it: in a real terminal
(tmux, 100x30), the daemon on 8 simulated servers streaming a snapshot every second.

1. CPU: the TUI process's CPU time over wall time (% of one core), median of windows.
   Target < 5%. Baseline in the same run: a bare Textual app (one Static, no data) in the
   same terminal: the framework's own floor.
2. Key press to visible response: `m` sent with tmux send-keys until the max-tokens dialog
   is on the screen (read with capture-pane, polled), then Escape until it is gone.
   Target < 100 ms, median. The bare app's modal on the same key is the same-run baseline
   (what tmux, the polling and Textual cost by themselves).

    python benchmarks/bench_tui.py [--servers 8] [--windows 3] [--window-s 10] [--presses 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import harness as daemon  # noqa: E402

SESSION = "dflash-bench-tui"

BARE_APP = '''
from textual.app import App
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

class Dialog(ModalScreen):
    BINDINGS = [("escape", "app.pop_screen", "close")]
    def compose(self):
        yield Static("Max tokens")

class Bare(App):
    BINDINGS = [("m", "open", "open")]
    def compose(self):
        yield Static("bare textual app")
        yield Footer()
    def action_open(self):
        self.push_screen(Dialog())

Bare().run()
'''


def tmux(*args: str) -> str:
    out = subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=10)
    if out.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args[:2])}: {out.stderr.strip()}")
    return out.stdout


def screen() -> str:
    return tmux("capture-pane", "-p", "-t", SESSION)


def wait_for(check, timeout_s: float = 30.0) -> float:
    """Seconds until capture-pane shows what `check` wants."""
    start = time.perf_counter()
    while True:
        if check(screen()):
            return time.perf_counter() - start
        if time.perf_counter() - start > timeout_s:
            raise RuntimeError(f"timed out; screen:\n{screen()}")
        time.sleep(0.002)


def app_process() -> psutil.Process:
    pane = psutil.Process(int(tmux("display-message", "-p", "-t", SESSION, "#{pane_pid}")))
    for p in [pane, *pane.children(recursive=True)]:
        if "python" in p.name() or "python" in " ".join(p.cmdline()[:1]):
            return p
    raise RuntimeError("no python process in the pane")


def cpu_percent(proc: psutil.Process, windows: int, window_s: float) -> list[float]:
    out = []
    for _ in range(windows):
        t0, c0 = time.monotonic(), sum(proc.cpu_times()[:2])
        time.sleep(window_s)
        t1, c1 = time.monotonic(), sum(proc.cpu_times()[:2])
        out.append(100.0 * (c1 - c0) / (t1 - t0))
    return out


def key_latency(presses: int, opened: str, marker_line: int | None = None) -> list[float]:
    out = []
    for _ in range(presses):
        tmux("send-keys", "-t", SESSION, "m")
        out.append(wait_for(lambda s: opened in s))
        tmux("send-keys", "-t", SESSION, "Escape")
        wait_for(lambda s: opened not in s)
        time.sleep(0.2)
    return out


def measure(command: str, ready, opened: str, args: argparse.Namespace) -> dict:
    tmux("new-session", "-d", "-s", SESSION, "-x", "100", "-y", "30", command)
    try:
        wait_for(ready, timeout_s=60)
        time.sleep(2.0)                      # past start-up
        proc = app_process()
        cpu = cpu_percent(proc, args.windows, args.window_s)
        lat = key_latency(args.presses, opened)
        return {"cpu_pct": cpu, "latency_ms": [1000 * x for x in lat]}
    finally:
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
        while subprocess.run(["tmux", "has-session", "-t", SESSION],
                             capture_output=True).returncode == 0:
            time.sleep(0.05)


def summary(m: dict) -> dict:
    lat = sorted(m["latency_ms"])
    return {"cpu_pct_median": round(statistics.median(m["cpu_pct"]), 2),
            "key_ms_median": round(statistics.median(lat), 1),
            "key_ms_p90": round(lat[int(0.9 * (len(lat) - 1))], 1)}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--servers", type=int, default=8)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--window-s", type=float, default=10.0)
    p.add_argument("--presses", type=int, default=20)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tui-") as tmp:
        bare = Path(tmp) / "bare_app.py"
        bare.write_text(BARE_APP)
        d = daemon.start(Path(tmp) / "job", servers=args.servers, prompts=200_000,
                         control={"interval_s": 1.0})
        try:
            base = measure(f"{sys.executable} {bare}", lambda s: "bare textual app" in s,
                           "Max tokens", args)
            tui = measure(f"cd {ROOT} && {sys.executable} -m tui --socket {d.socket}",
                          lambda s: "● live" in s and s.count("READY") >= args.servers,
                          "Max tokens", args)
            servers = len(d.client().status().servers)
        finally:
            d.stop()
    b, t = summary(base), summary(tui)
    result = {
        "servers": servers, "snapshot_interval_s": 1.0,
        "tui": t, "bare_textual_app": b,
        "cpu_ratio_vs_bare": round(t["cpu_pct_median"] / max(b["cpu_pct_median"], 0.01), 2),
        "key_ratio_vs_bare": round(t["key_ms_median"] / max(b["key_ms_median"], 0.01), 2),
        "targets": {"cpu_pct": "< 5", "key_ms": "< 100"},
        "raw": {"tui": tui, "bare": base},
    }
    print(json.dumps(result, indent=2))
    ok = t["cpu_pct_median"] < 5.0 and t["key_ms_median"] < 100.0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
