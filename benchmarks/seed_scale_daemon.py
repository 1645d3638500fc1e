"""Seed scale's live figures: the real daemon on fast simulated servers for a slice of the job
(its RSS, its CPU per answer, what a status call costs it, paused and busy) and dflash-tui
attached to it in tmux."""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from harness import ROOT, read_db, spawn
from seed_scale_job import config, timed


def anon_rss_mb(pid: int) -> float:
    for raw in Path(f"/proc/{pid}/status").read_text().splitlines():
        if raw.startswith("RssAnon:"):
            return int(raw.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    import psutil
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def tui_cpu(sock: str, windows: int = 2, window_s: float = 8.0) -> float:
    """dflash-tui attached in a real terminal (tmux, 100x30), snapshots every second: the
    median of its CPU over `windows` windows, % of one core (bench_tui.py's method)."""
    import bench_tui as bt
    bt.tmux("new-session", "-d", "-s", bt.SESSION, "-x", "100", "-y", "30",
            f"cd {ROOT} && {sys.executable} -m tui --socket {sock}")
    try:
        bt.wait_for(lambda s: "● live" in s, timeout_s=60)
        time.sleep(2.0)
        return statistics.median(bt.cpu_percent(bt.app_process(), windows, window_s))
    finally:
        subprocess.run(["tmux", "kill-session", "-t", bt.SESSION], capture_output=True)


def daemon_slice(work: Path, args: argparse.Namespace, answers: int,
                 stream_step: int) -> dict[str, Any]:
    """The real daemon on fast simulated servers until `answers` more are done (or the job
    ends); its RSS, CPU, and the status calls' cost meanwhile."""
    from supervisor.client.control_client import ControlClient, ControlUnreachable
    from supervisor.demo.free_ports import free_base_port
    data = config(work, args, stream_step)
    data["servers"]["base_port"] = free_base_port(2)
    proc = spawn(work, data)
    sock = data["control"]["socket"]
    r: dict[str, Any] = {}
    try:
        with ControlClient(sock, timeout_s=30.0) as client:
            deadline = time.monotonic() + 300
            while True:
                try:
                    st = client.status()
                    if all(s.state.value == "READY" for s in st.servers):
                        break
                except ControlUnreachable:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"daemon did not start: "
                                     f"{(work / 'daemon.log').read_text()[-2000:]}")
                time.sleep(0.2)
            # The status call alone, dispatch paused (on two shared cores a busy daemon's
            # queueing would be all one measured): what the TUI's 1 Hz refresh costs.
            client.pause("bench: status cost")
            time.sleep(2.0)
            c0, lat2 = cpu_s(proc.pid), []
            t_idle = time.monotonic()
            for _ in range(20):
                a = time.perf_counter()
                raw = client.status()
                lat2.append(time.perf_counter() - a)
            idle_s = time.monotonic() - t_idle
            # The daemon's own background CPU (hub, watchdogs) over the same span is in
            # this figure too; small next to a status build at 900K if that grows.
            r["status_call_ms"] = 1000 * statistics.median(lat2)
            r["daemon_cpu_ms_per_status"] = 1000 * (cpu_s(proc.pid) - c0) / 20
            r["status_span_s"] = idle_s
            from supervisor.contract.codec import dumps
            r["snapshot_bytes"] = len(dumps(raw).encode())
            r["status_cli_live_s"] = timed([sys.executable, "-m", "supervisor", "status",
                                            "--socket", sock], work)["s"]
            if args.tui:
                r["tui_cpu_pct"] = tui_cpu(sock)
            busy_tui: dict[str, float] = {}
            tui_thread = None
            if args.tui:
                # The TUI again while the daemon dispatches flat out: what it costs to watch
                # a busy 900K job (its figures change every second).
                tui_thread = threading.Thread(
                    target=lambda: busy_tui.update(pct=tui_cpu(sock, windows=2, window_s=6.0)),
                    daemon=True)
            client.resume()
            if tui_thread is not None:
                tui_thread.start()
            st = client.status()
            start_done, start_cpu, t0 = st.job.done, cpu_s(proc.pid), time.monotonic()
            r["rss_start_mb"] = anon_rss_mb(proc.pid)
            target = min(st.job.total, start_done + answers)
            r["target_is_end"] = target == st.job.total
            lat = []
            end_cpu = start_cpu
            while proc.poll() is None and time.monotonic() - t0 < 900:
                a = time.perf_counter()
                try:
                    st = client.status()
                    end_cpu = cpu_s(proc.pid)
                    r["rss_end_mb"] = anon_rss_mb(proc.pid)
                except ControlUnreachable as exc:
                    r["unreachable"] = str(exc)[:200]     # the job's end, or a busy socket
                    time.sleep(0.5)
                    continue
                except Exception:                       # psutil's NoSuchProcess at the end
                    if proc.poll() is None:
                        raise
                    break
                lat.append(time.perf_counter() - a)
                if st.job.done >= target:
                    r["ended"] = f"done {st.job.done} >= {target}"
                    break
                time.sleep(0.5)
            elapsed = time.monotonic() - t0
            answered = st.job.done - start_done
            if tui_thread is not None:
                tui_thread.join(timeout=60)
                r["tui_cpu_busy_pct"] = busy_tui.get("pct")
            # The simulated servers' answers (the bulk ones are server 'bulk'): streamed
            # chunks are about one per stream_step tokens, plus the two that open each part.
            n, tokens = read_db(work / "job.db", "SELECT count(*), coalesce(sum("
                                "completion_tokens), 0) FROM prompts WHERE status = 'done' "
                                "AND server <> 'bulk'")[0]
            r["sim_answers_total"], r["sim_tokens_per_answer"] = n, tokens / max(1, n)
            r.update(answered=answered, elapsed_s=elapsed,
                     cpu_ms_per_answer=1000 * (end_cpu - start_cpu) / max(1, answered),
                     busy_status_ms_median=1000 * statistics.median(lat) if lat else None,
                     busy_status_ms_p90=(1000 * sorted(lat)[int(0.9 * len(lat))]
                                         if lat else None))
    finally:
        if proc.poll() is None and r.get("target_is_end"):
            try:                 # the job's last answers: let it finish, shard and exit
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    r["exit"] = proc.returncode
    return r
