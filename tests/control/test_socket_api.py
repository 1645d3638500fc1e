"""The control socket on a real daemon (simulated servers): the status shape, refusals of
bad and hostile requests, /metrics, the server log."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.client.control_client import ControlRefused
from supervisor.contract import status as c
from tests.fixtures import control_daemon as daemon
from tests.fixtures.raw_http import exchange

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[daemon.Daemon]:
    running = daemon.start(tmp_path_factory.mktemp("api") / "job")
    yield running
    assert running.stop() == 0, running.log()[-3000:]


def raw(d: daemon.Daemon, data: bytes, timeout_s: float = 5.0) -> bytes:
    """Send bytes as they are; read the answer until the daemon closes or goes quiet."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(d.socket)
        return exchange(s, data, timeout_s)


def request(d: daemon.Daemon, method: str, path: str, body: bytes = b"",
            headers: str = "") -> tuple[int, dict]:
    head = (f"{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\ncontent-type: application/json\r\n{headers}\r\n")
    answer = raw(d, head.encode() + body)
    status_line, _, rest = answer.partition(b"\r\n")
    code = int(status_line.split()[1])
    payload = rest.partition(b"\r\n\r\n")[2]
    return code, json.loads(payload) if payload.startswith(b"{") else {"raw": payload}


def test_status_has_every_contract_field(d: daemon.Daemon) -> None:
    code, data = request(d, "GET", "/v1/status")
    assert code == 200
    assert set(data) == {f.name for f in dataclasses.fields(c.Status)}
    s = c.Status.from_plain(data)
    assert s.schema_version == c.SCHEMA_VERSION and s.daemon_pid == d.proc.pid
    assert [x.name for x in s.servers] == ["gpu0", "gpu1"]
    assert all(x.state is c.ServerState.READY and x.pid for x in s.servers)
    flags = {f.name: f.value for f in s.servers[0].flags}
    assert flags["max-running-requests"] == 8 and flags["context-length"] == 4096
    assert s.context_length == 4096 and s.max_tokens == 256
    assert s.job.total == 20_000
    assert len(s.output_lengths.edges) == len(s.output_lengths.counts) + 1
    assert s.output_lengths.edges[-1] > s.max_tokens
    assert any(e.kind == "job_started" for e in s.recent_events)


def test_the_client_reads_what_the_socket_serves(d: daemon.Daemon) -> None:
    with d.client() as client:
        first = client.status()
        d.wait_status(lambda s: s.job.done > first.job.done, "progress")
        tail = client.log("gpu0", 5)
    assert 1 <= len(tail.lines) <= 5 and tail.path.endswith("gpu0.log")


@pytest.mark.parametrize("method,path,body,code,reason", [
    ("POST", "/v1/max-tokens", b"{nope", 400, "not JSON"),
    ("POST", "/v1/max-tokens", b'{"value": "lots"}', 400, "MaxTokensRequest.value: expected int"),
    ("POST", "/v1/max-tokens", b'{"value": true}', 400, "value: expected int"),
    ("POST", "/v1/max-tokens", b"[1, 2]", 400, "expected an object"),
    ("POST", "/v1/max-tokens", b"{}", 400, "value: missing"),
    ("POST", "/v1/max-tokens", b'{"value": 4096}', 422, "context length"),
    ("POST", "/v1/max-tokens", b'{"value": 0}', 422, ">= 1"),
    ("POST", "/v1/pause", b'{"reason": "   "}', 400, "must not be empty"),
    ("POST", "/v1/retune", b'{"flags": [{"name": "mem-fraction-statik", "value": 0.8}]}',
     422, "unknown flag 'mem-fraction-statik'"),
    ("POST", "/v1/retune", b'{"flags": [{"name": "port", "value": 1}], "add": true}',
     422, "set by the supervisor"),
    ("POST", "/v1/restart", b'{"server": "gpu9"}', 404, "no server named 'gpu9'"),
    ("POST", "/v1/servers/gpu0/reset", b"", 409, "not FAILED"),
    ("GET", "/v1/servers/nope/log", b"", 404, "no server named 'nope'"),
    ("GET", "/v1/servers/gpu0/log?lines=abc", b"", 400, "lines"),
    ("GET", "/v1/events?since=-3", b"", 400, "since"),
    ("GET", "/v2/status", b"", 404, "no such path"),
    ("DELETE", "/v1/status", b"", 405, "DELETE is not allowed"),
    ("GET", "/v1/pause", b"", 405, "GET is not allowed"),
])
def test_bad_requests_get_a_4xx_with_one_line(d: daemon.Daemon, method: str, path: str,
                                               body: bytes, code: int, reason: str) -> None:
    got, data = request(d, method, path, body)
    assert got == code, data
    assert reason in data["error"] and "\n" not in data["error"] and data["status"] == code


def test_refusals_change_nothing_and_reach_the_client_as_refused(d: daemon.Daemon) -> None:
    with d.client() as client:
        before = client.status().max_tokens
        with pytest.raises(ControlRefused) as info:
            client.set_max_tokens(999_999)
        assert info.value.status == 422 and "context length" in info.value.reason
        assert client.status().max_tokens == before


def test_oversized_bodies_are_refused_without_reading_them(d: daemon.Daemon) -> None:
    code, data = request(d, "POST", "/v1/pause", b'{"reason": "' + b"x" * 200_000 + b'"}')
    assert code == 413 and "over 65536 bytes" in data["error"]
    # A lying content-length (small) with a huge chunked body is cut off while streaming.
    head = (b"POST /v1/pause HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
    chunk = b"x" * 60_000
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(3)) + b"0\r\n\r\n"
    answer = raw(d, head + body)
    assert b" 413 " in answer.split(b"\r\n")[0]


@pytest.mark.parametrize("garbage", [
    b"\x00\x01\x02\xff" * 100 + b"\r\n\r\n",
    b"BREW /v1/status HTCPCP/1.0\r\n\r\n",
    b"GET " + b"/a" * 40_000 + b" HTTP/1.1\r\nhost: x\r\n\r\n",
    b"GET /v1/status HTTP/1.1\r\n" + b"x-junk: " + b"y" * 40_000 + b"\r\n\r\n",
    b"POST /v1/pause HTTP/1.1\r\nhost: x\r\ncontent-length: 99999999999999999999\r\n\r\n{}",
], ids=["binary", "unknown-method", "huge-url", "huge-header", "huge-content-length"])
def test_garbage_gets_an_error_and_the_daemon_carries_on(d: daemon.Daemon,
                                                         garbage: bytes) -> None:
    answer = raw(d, garbage)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer[:200]
    with d.client() as client:
        assert client.status().daemon_pid == d.proc.pid


def test_half_sent_requests_do_not_block_others(d: daemon.Daemon) -> None:
    stalled = []
    try:
        for _ in range(20):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.socket)
            s.sendall(b"POST /v1/pause HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
            stalled.append(s)
        with d.client() as client:
            s1 = client.status()
            s2 = d.wait_status(lambda s: s.job.done > s1.job.done, "dispatch going on")
        assert not s2.paused
    finally:
        for s in stalled:
            s.close()


def test_metrics_are_prometheus_text(d: daemon.Daemon) -> None:
    got = raw(d, b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"200" in head.split(b"\r\n")[0] and b"text/plain" in head
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    for name in ("dflash_prompts", "dflash_output_tokens", "dflash_requests",
                 "dflash_server_restarts", "dflash_in_flight", "dflash_servers",
                 "dflash_max_tokens", "dflash_gpu_power_watts"):
        assert name in families, sorted(families)
    done = {s.labels["outcome"]: s.value for s in families["dflash_prompts"].samples
            if s.name == "dflash_prompts_total"}
    assert set(done) == {"done", "failed"} and done["done"] >= 0
    ready = [s.value for s in families["dflash_servers"].samples if s.labels["state"] == "READY"]
    assert ready == [2.0]
    assert families["dflash_max_tokens"].samples[0].value == 256


def test_headers_that_never_end_are_cut_off(d: daemon.Daemon) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(d.socket)
    try:
        s.sendall(b"GET /v1/status HTTP/1.1\r\nhost: x\r\nx-drip: ")
        answer = b""
        for _ in range(40):              # 40 x 4 KiB of one header value, never finished
            try:
                s.sendall(b"y" * 4096)
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.01)
        try:
            answer = s.recv(65536)
        except ConnectionResetError:
            pass
        assert answer.startswith(b"HTTP/1.1 400"), answer[:100]
    finally:
        s.close()
