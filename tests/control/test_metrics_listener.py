"""The read-only metrics listener (control.metrics_listen) on a real daemon over simulated
servers: the socket's /metrics over TCP and nothing else, hostile clients refused without
stalling the job, and a taken port stopping the start with one line."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.control.metrics_listener import CONNECTION_DEADLINE_S, MAX_CONNECTIONS
from tests.fixtures import control_daemon as daemon
from tests.fixtures.ports import free_port
from tests.fixtures.raw_http import exchange

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[daemon.Daemon, str]]:
    port = free_port()
    running = daemon.start(tmp_path_factory.mktemp("listener") / "job",
                           control={"metrics_listen": f"127.0.0.1:{port}"})
    yield running, f"http://127.0.0.1:{port}"
    assert running.stop() == 0, running.log()[-3000:]


def families(text: str) -> dict[str, set[frozenset[str]]]:
    """Each family's label names per sample: what two scrapes of one daemon share."""
    out: dict[str, set[frozenset[str]]] = {}
    for f in text_string_to_metric_families(text):
        out.setdefault(f.name, set()).update(frozenset(s.labels) for s in f.samples)
    return out


def raw(url: str, data: bytes, timeout_s: float = 10.0) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        return exchange(s, data, timeout_s)


def test_it_serves_the_sockets_metrics_text(d: tuple[daemon.Daemon, str]) -> None:
    running, url = d
    tcp = httpx.get(f"{url}/metrics", timeout=10)
    assert tcp.status_code == 200 and tcp.headers["content-type"].startswith("text/plain")
    transport = httpx.HTTPTransport(uds=running.socket)
    with httpx.Client(transport=transport, trust_env=False) as client:
        unix = client.get("http://daemon/metrics", timeout=10).text
    # The same families, and the same label names wherever both scrapes had a sample: the
    # two scrapes are moments apart, and a gauge such as SGLang's retraction rate has its
    # first sample only once a second poll of the server gave a rate.
    a, b = families(tcp.text), families(unix)
    assert a.keys() == b.keys()
    assert all(a[name] == b[name] for name in a if a[name] and b[name]), (a, b)
    assert "dflash_prompts" in families(tcp.text)
    assert httpx.head(f"{url}/metrics", timeout=10).status_code == 200


@pytest.mark.parametrize("method,path,code", [
    ("GET", "/v1/status", 404), ("GET", "/", 404), ("POST", "/v1/pause", 404),
    ("POST", "/v1/max-tokens", 404), ("POST", "/metrics", 405), ("DELETE", "/metrics", 405),
    ("GET", "/v1/events", 404), ("GET", "/v1/servers/gpu0/log", 404)])
def test_everything_else_is_refused(d: tuple[daemon.Daemon, str], method: str, path: str,
                                    code: int) -> None:
    running, url = d
    got = httpx.request(method, f"{url}{path}", json={"reason": "x", "max_tokens": 9},
                        timeout=10)
    assert got.status_code == code and "only GET /metrics" in got.text
    s = running.wait_status(lambda s: True, "a status")
    assert not s.paused and s.max_tokens == 256


def test_a_query_string_reaches_nothing_else(d: tuple[daemon.Daemon, str]) -> None:
    _, url = d
    got = httpx.get(f"{url}/metrics?since=0&lines=5", timeout=10)
    assert got.status_code == 200 and "dflash_prompts_total" in got.text


def test_garbage_and_oversized_heads_are_refused(d: tuple[daemon.Daemon, str]) -> None:
    running, url = d
    garbage = raw(url, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)))
    assert garbage.startswith(b"HTTP/1.1 400"), garbage[:200]
    huge = raw(url, b"GET /metrics HTTP/1.1\r\nhost: x\r\nx-big: " + b"y" * 64_000 + b"\r\n\r\n")
    assert huge.startswith(b"HTTP/1.1 431"), huge[:200]
    # A scanner on the cluster's network does not fill the journal.
    assert "Invalid HTTP request" not in running.log()


def test_idle_and_dripping_connections_do_not_stall_the_job(
        d: tuple[daemon.Daemon, str]) -> None:
    running, url = d
    host, port = url.removeprefix("http://").split(":")
    held = []
    try:
        for i in range(MAX_CONNECTIONS + 20):
            s = socket.create_connection((host, int(port)), timeout=10)
            if i % 2:
                s.sendall(b"GET /metrics HTTP/1.1\r\nhost: x\r\nx-drip: ")   # never ends
            held.append(s)
        before = running.wait_status(lambda s: True, "a status")
        running.wait_status(lambda s: s.job.done > before.job.done, "dispatch going on")
        # The listener closes every one of them at its deadline; a scrape then succeeds.
        deadline = time.monotonic() + CONNECTION_DEADLINE_S + 30
        for s in held:
            assert _closed_by_peer(s, deadline), "a connection outlived the listener's deadline"
        got = httpx.get(f"{url}/metrics", timeout=10)
        assert got.status_code == 200
    finally:
        for s in held:
            s.close()


def _closed_by_peer(s: socket.socket, deadline: float) -> bool:
    """Whether the listener closes `s` before `deadline` (after a 503 or without a word)."""
    for _ in range(100):
        s.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            if not s.recv(65536):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
    return False


def test_a_taken_port_stops_the_start_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        data = daemon.config_dict(tmp_path, control={"metrics_listen": f"127.0.0.1:{port}"})
        proc = daemon.spawn(tmp_path, data)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    log = (tmp_path / "daemon.log").read_text()
    assert code == 2, log
    [line] = [x for x in log.splitlines() if "control.metrics_listen" in x]
    assert f"port {port} is in use by pid {os.getpid()}" in line and "choose another port" in line
    assert not (tmp_path / "control.sock").exists()
