"""The demo's live line fits the terminal it is drawn on (80 columns is first-class): details
give way before figures, alarms stay, and a file or pipe still gets every figure."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import termios
from dataclasses import replace
from pathlib import Path

import pytest

from supervisor.demo.progress import REDRAW, ProgressPrinter
from supervisor.dispatch.length_eta import EtaEstimate
from supervisor.dispatch.rate_window import RateSnapshot
from supervisor.job.progress_line import progress_line
from supervisor.job.status import JobStatus
from supervisor.servers.server_state import ServerState
from tests.fixtures.job_status import job_status, server_snapshot


def mid_job(tmp_path: Path, **changes: object) -> JobStatus:
    """What the demo showed at 80 columns and garbled: 16% done, the truncation split, an
    ETA range while warming up (~190 characters in full)."""
    servers = tuple(server_snapshot(f"gpu{i}", ServerState.READY) for i in range(3))
    s = job_status(tmp_path, done=1843, pending=1100, in_flight=57, servers=servers)
    q = replace(s.dispatch.quality, truncation_rate=0.175, thinking_truncated_rate=0.11,
                answer_truncated_rate=0.065, long_rate=0.13, loop_rate=0.045, bad_rate=0.015)
    rates = RateSnapshot(req_per_s=51.2, tok_per_s=103_400, avg_output_tokens=2019,
                         completions=900, span_s=30, warming_up=True)
    eta = EtaEstimate(eta_s=23, low_s=20, high_s=25, warming_up=True, reason=None,
                      expected_tokens=None, remaining_tokens=None, tok_per_s=None,
                      decode_tok_per_s=None, observed=900, censored=0)
    s = replace(s, dispatch=replace(s.dispatch, quality=q, rates=rates), length_eta=eta)
    return replace(s, **changes)


def test_the_whole_line_keeps_every_figure(tmp_path: Path) -> None:
    line = progress_line(mid_job(tmp_path))
    assert len(line) > 150
    for figure in ("1843/3000 (61%)", "103.4k tok/s", "avg 2019 tok", "in thinking 11.0%",
                   "loop 4.5%", "[20s-25s]", "(warming up)", "servers 3/3 ready"):
        assert figure in line


@pytest.mark.parametrize("width", [79, 100, 119])
def test_fitted_to_a_terminal_the_figures_that_matter_stay(tmp_path: Path, width: int) -> None:
    line = progress_line(mid_job(tmp_path), width=width)
    assert len(line) <= width, line
    for figure in ("1843/3000", "51.2 req/s", "trunc 17.5%", "bad 1.5%", "ETA ", "3/3 ready"):
        assert figure in line, line
    assert "…" not in line


def test_at_80_columns_details_go_before_throughput(tmp_path: Path) -> None:
    line = progress_line(mid_job(tmp_path), width=79)
    assert "in thinking" not in line and "[20s-25s]" not in line and "avg" not in line
    assert line.startswith("1843/3000")


def test_an_alarm_is_never_dropped_and_a_too_long_one_is_cut_visibly(tmp_path: Path) -> None:
    s = mid_job(tmp_path)
    paused = replace(s, dispatch=replace(s.dispatch, paused={"operator": "x" * 200}))
    line = progress_line(paused, width=79)
    assert len(line) == 79 and line.endswith("…") and "PAUSED (operator): xx" in line
    stopping = progress_line(replace(s, stopping="draining: SIGTERM"), width=79)
    assert stopping.startswith("DRAINING: SIGTERM") and len(stopping) <= 79


def _pty(columns: int) -> tuple[int, int]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return master, slave


def _drain(fd: int) -> str:
    """Everything written so far: a pty hands it over in pieces."""
    out = b""
    for _ in range(100):
        ready, _w, _x = select.select([fd], [], [], 0.2)
        if not ready:
            break
        out += os.read(fd, 65536)
    return out.decode()


def test_on_a_terminal_each_redraw_fits_its_width_and_follows_a_resize(tmp_path: Path) -> None:
    master, slave = _pty(80)
    stream = os.fdopen(slave, "w")
    try:
        printer = ProgressPrinter(stream, interval_s=5.0)
        printer(mid_job(tmp_path))
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
        printer(mid_job(tmp_path))
        printer.end()
        out = _drain(master)
    finally:
        stream.close()
        os.close(master)
    draws = [d.rstrip("\r\n") for d in out.split(REDRAW) if d]
    assert len(draws) == 2
    assert len(draws[0]) <= 79 and "51.2 req/s" in draws[0]
    assert len(draws[1]) <= 59 and "51.2 req/s" in draws[1]


def test_a_pipe_gets_whole_lines(tmp_path: Path) -> None:
    read, write = os.pipe()
    stream = os.fdopen(write, "w")
    try:
        ProgressPrinter(stream, interval_s=0.0)(mid_job(tmp_path))
        stream.flush()
        out = os.read(read, 65536).decode()
    finally:
        stream.close()
        os.close(read)
    assert out == progress_line(mid_job(tmp_path)) + "\n"


def test_every_server_failed_shows_no_eta_and_the_demo_gives_no_daemon_advice(
        tmp_path: Path) -> None:
    """No countdown beside EVERY SERVER FAILED; `ctl reset` only where a daemon stays."""
    failed = tuple(server_snapshot(f"gpu{i}", ServerState.FAILED) for i in range(3))
    s = mid_job(tmp_path, servers=failed)
    for line in (progress_line(s), progress_line(s, width=79)):
        assert "EVERY SERVER FAILED" in line and "ETA" not in line, line
    assert "ctl reset NAME" in progress_line(s)
    demo_line = progress_line(s, daemon=False)
    assert "EVERY SERVER FAILED" in demo_line and "ctl reset" not in demo_line


def test_while_paused_the_eta_is_on_hold_not_counting_down(tmp_path: Path) -> None:
    """A paused job's ETA says it is on hold, in the line and in the contract."""
    from supervisor.job.contract_status import _eta

    s = mid_job(tmp_path)
    paused = replace(s, dispatch=replace(s.dispatch, paused={"operator": "by operator"}))
    assert paused.eta_s is None
    assert "ETA on hold (paused)" in progress_line(paused)
    assert "ETA 23s" not in progress_line(paused)
    e = _eta(paused)
    assert (e.seconds, e.held, e.warming_up) == (None, "paused", False)
    # Not paused, the same figures count down as before.
    assert _eta(s).seconds == 23 and _eta(s).held is None


def test_the_truncation_share_names_its_window(tmp_path: Path) -> None:
    """The progress line's trunc is the quality window's, and says how many answers it spans."""
    s = mid_job(tmp_path)
    s = replace(s, dispatch=replace(s.dispatch, quality=replace(s.dispatch.quality,
                                                                  samples=200)))
    assert "trunc (last 200) 17.5%" in progress_line(s)
