"""The HTTP client each dispatch worker owns: one keep-alive connection to its server.

Why one per worker and not one per server: on every request start and end, httpcore's pool
looks over each of its connections, checks each idle one against all the others and polls
its socket for a close by the server. With a pool shared by a server's N slots that is O(N)
to O(N^2) work per request; in benchmarks/bench_dispatch.py (2 servers x 32 slots, streamed)
it was about a third of the daemon's CPU. A worker sends one request at a time, so its own
pool holds one connection (two while an abort goes out beside an open stream) and each look
is O(1).

All clients share one SSL context: httpx otherwise builds one per client and loads the CA
bundle into it (~17 ms each, for thousands of slots a long start). The servers are plain HTTP
on this node; the context is only there because httpx wants one.
"""

from __future__ import annotations

import ssl
from functools import cache

import httpx


@cache
def _ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def worker_client(timeout_s: float) -> httpx.AsyncClient:
    # trust_env=False: a proxy from the environment must never carry loopback traffic.
    return httpx.AsyncClient(trust_env=False, timeout=timeout_s, verify=_ssl_context(),
                             limits=httpx.Limits(max_connections=None,
                                                 max_keepalive_connections=1))
