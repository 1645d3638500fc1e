"""A small fault-injecting HTTP proxy for tests, in front of the moto server on loopback.

The daemon's S3 client talks to the proxy as if it were S3; the proxy relays each request
to moto and the answer back, unless told to misbehave:
- `corrupt_puts = N`: flip one byte in the body of the next N PUTs (a put or an upload part)
  while keeping every header, so moto stores damaged bytes and answers as if all were well
  (it does not check Content-MD5 or the SHA-256 checksum);
- `fail_next = [(status, code), ...]`: answer the next requests with these S3 errors;
- `fake_etags = N`: replace the ETag of the next N PUT answers (a store whose ETag is not MD5);
- `delay_s`: hold each request this long before relaying it;
- `stop()` / `start()`: close the port (connections refused, pooled ones cut), open it again.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support import free_port

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
              "trailer", "upgrade", "expect"}


class FaultProxy:
    def __init__(self, upstream_port: int, port: int | None = None) -> None:
        self.upstream_port = upstream_port
        self.port = port or free_port()
        self.corrupt_puts = 0
        self.corrupted = 0
        self.fake_etags = 0
        self.fail_next: list[tuple[int, str]] = []
        self.delay_s = 0.0
        self.requests: list[tuple[str, str]] = []
        self.active_puts = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_Relay):
            owner = proxy

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Refuse new connections and cut the open ones, as a dead endpoint would."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = None

    # -- decisions (called from handler threads) ----------------------------------------------

    def _take(self, method: str, path: str, body: bytes) -> tuple[str, object]:
        with self._lock:
            self.requests.append((method, path))
            if self.fail_next:
                return "fail", self.fail_next.pop(0)
            if method == "PUT" and body and self.corrupt_puts > 0:
                self.corrupt_puts -= 1
                self.corrupted += 1
                return "corrupt", None
            if method == "PUT" and body and self.fake_etags > 0:
                self.fake_etags -= 1
                return "fake-etag", None
        return "pass", None


class _Relay(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        with self.owner._lock:
            self.owner._conns.add(self.connection)

    def finish(self) -> None:
        with self.owner._lock:
            self.owner._conns.discard(self.connection)
        super().finish()

    def do_GET(self) -> None:
        self._relay()

    do_PUT = do_POST = do_HEAD = do_DELETE = do_GET

    def _relay(self) -> None:
        proxy = self.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        action, detail = proxy._take(self.command, self.path, body)
        if action == "fail":
            status, code = detail  # type: ignore[misc]
            self._error(status, code)
            return
        if action == "corrupt":
            middle = len(body) // 2
            body = body[:middle] + bytes([body[middle] ^ 0x20]) + body[middle + 1:]
        is_put = self.command == "PUT" and bool(body)
        if is_put:
            with proxy._lock:
                proxy.active_puts += 1
        try:
            if proxy.delay_s:
                time.sleep(proxy.delay_s)
            status, headers, data = self._upstream(body)
        finally:
            if is_put:
                with proxy._lock:
                    proxy.active_puts -= 1
        if action == "fake-etag":
            headers = [(k, '"not-an-md5-etag"' if k.lower() == "etag" else v)
                       for k, v in headers]
        self.send_response(status)
        for name, value in headers:
            low = name.lower()
            if low in HOP_BY_HOP or low in ("server", "date"):
                continue
            if low == "content-length" and self.command != "HEAD":
                continue
            self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _upstream(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.owner.upstream_port, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            conn.request(self.command, self.path, body=body if length_matters(self.command, body)
                         else None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, list(resp.getheaders()), data
        finally:
            conn.close()

    def _error(self, status: int, code: str) -> None:
        data = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>injected by the test proxy</Message></Error>").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def length_matters(method: str, body: bytes) -> bool:
    return bool(body) or method in ("PUT", "POST")
