"""The HTTP client each dispatch worker owns, and what its failures mean for a request.

aiohttp, not httpx, on this one path: every completion and every streamed chunk goes through
it, and its request path with a C HTTP parser costs a quarter of httpx's CPU per request
(benchmarks/bench_dispatch.py: 0.13 vs 0.57 ms per streamed request against the same
simulated servers, 0.10 vs 0.49 ms unstreamed). The rest of the daemon (health checks,
metrics scrapes, /server_info, aborts, the control socket's client) stays on httpx, where
requests are few. What is posted, and where, is SGLang's (supervisor/sglang/chat_request.py).

Why a client per worker and not one per server: a worker sends one request at a time, so
its pool holds one keep-alive connection and the pool's bookkeeping per request is O(1); a
pool shared by a server's N slots made httpx scan all N connections on every request start
and end (a third of the daemon's CPU, when it was httpx's). Cookies are never kept (a
DummyCookieJar: SGLang sets none, and parsing headers for them is per-request work), proxies
from the environment never apply (trust_env False: loopback traffic must not leave through
one).
"""

from __future__ import annotations

from functools import lru_cache

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from supervisor.dispatch.completion import Retryable

# What a request on the wire can raise that is the server's or the network's doing. Caught
# by the dispatch path and turned into an answer by wire_failure (never raised further).
WIRE_ERRORS = (aiohttp.ClientError, HttpProcessingError, TimeoutError)


def worker_client(timeout_s: float) -> aiohttp.ClientSession:
    """One worker's session; call inside the event loop, close with `await s.close()`.
    `timeout_s` bounds connecting and each read (not the whole request: a stream may run
    long while its tokens keep coming), as httpx's timeout did before."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_read=timeout_s),
        cookie_jar=aiohttp.DummyCookieJar(), trust_env=False, raise_for_status=False)


@lru_cache(maxsize=8)
def request_timeout(timeout_s: float) -> aiohttp.ClientTimeout:
    """A request's own bound on connecting and on each read, passed with each request so a
    reloaded `dispatch.request_timeout_s` applies to the next request sent, not from the
    server's next life (the session's own bound is the one it was made with). Cached: one
    object per value, not one per request."""
    return aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_read=timeout_s)


def wire_failure(exc: BaseException, timeout_s: float) -> tuple[Retryable | None, str | None]:
    """(answer, gone) for an exception in WIRE_ERRORS: a timeout or a reply that is not
    HTTP is an answer (a retry); a connection refused, reset or closed mid-answer is `gone`
    (the dispatcher waits to see whether the server died before it counts an attempt)."""
    name = type(exc).__name__
    if isinstance(exc, TimeoutError):           # aiohttp's own timeouts subclass it
        return Retryable(f"no answer within {timeout_s:g} s ({name})", "timeout"), None
    if isinstance(exc, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
        return None, f"{name}: {exc}"
    # A status line, header or chunk that is not HTTP: the server answered nonsense.
    return Retryable(f"unreadable answer ({name}: {exc})", "nonsense answer"), None
