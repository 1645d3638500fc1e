"""What systemd hears from the supervision loop, read from a real datagram socket standing in
for $NOTIFY_SOCKET: READY=1 once, STATUS= every round, WATCHDOG=1 at half of WATCHDOG_USEC
(and only when the pings are meant for this process), STOPPING=1 with the reason."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.job.notify import Notifier
from supervisor.job.systemd_report import SystemdReport
from tests.fixtures.job_status import job_status as _status


@pytest.fixture
def systemd_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.setblocking(False)
    yield sock, path
    sock.close()


def _received(sock: socket.socket) -> list[str]:
    got = []
    while True:
        try:
            got.append(sock.recv(4096).decode())
        except BlockingIOError:
            return got


def test_ready_once_then_status_every_round_then_stopping(systemd_socket, tmp_path,
                                                           monkeypatch):
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    sock, path = systemd_socket
    report = SystemdReport(Notifier(path))
    status = _status(tmp_path, pending=5)
    for _ in range(3):
        report.ready()
        report.progress(status)
    report.stopping("stopped by SIGTERM")
    report.stopped()
    got = _received(sock)
    assert got[0] == "READY=1"
    assert [m for m in got if m == "READY=1"] == ["READY=1"]
    statuses = [m for m in got if m.startswith("STATUS=") and "\n" not in m]
    assert len(statuses) == 4 and statuses[0].startswith("STATUS=10/15 (67%)")
    assert "STOPPING=1\nSTATUS=stopped by SIGTERM" in got
    assert got[-1] == "STATUS=stopped"
    assert not any("WATCHDOG" in m for m in got)          # systemd asked for no pings


def test_watchdog_pings_at_half_the_interval_from_the_loop(systemd_socket, tmp_path,
                                                            monkeypatch):
    sock, path = systemd_socket
    monkeypatch.setenv("WATCHDOG_USEC", "200000")          # 0.2 s: a ping every 0.1 s
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    report = SystemdReport(Notifier(path))
    status = _status(tmp_path, pending=5)
    report.progress(status)
    report.progress(status)                                # too soon for a second ping
    time.sleep(0.12)
    report.progress(status)
    report.stopped()
    assert [m for m in _received(sock) if m == "WATCHDOG=1"] == ["WATCHDOG=1"] * 2


def test_pings_meant_for_another_process_are_not_sent(systemd_socket, tmp_path, monkeypatch):
    sock, path = systemd_socket
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    report = SystemdReport(Notifier(path))
    report.progress(_status(tmp_path, pending=5))
    report.stopped()
    assert not any("WATCHDOG" in m for m in _received(sock))
