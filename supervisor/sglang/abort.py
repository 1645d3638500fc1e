"""Stopping one request on a server by its request id: `POST /abort_request`.

SGLang 0.5.23 takes `{"rid": R, "abort_all": false}` and answers 200 at once
(`sglang/srt/entrypoints/http_server.py:1721` abort_request, TokenizerManager.abort_request at
`sglang/srt/managers/tokenizer_manager.py:2241`); a streamed request so stopped ends with
finish_reason "abort" and the usage of what it produced. An id the server does not hold is
ignored (tokenizer_manager.py:2252), so naming one already finished is safe. The scheduler
aborts every request whose id *starts with* the one named (`sglang/srt/managers/
scheduler.py:5675` abort_request): request_ids.py keeps the ids prefix-free.

Spoken with httpx, as the daemon's other few requests to SGLang are (health, /server_info,
/metrics): aborts are rare (a stall, a loop, a timeout, the answers a dead daemon left), so
aiohttp's lower cost per request, which the dispatch path's completions need
(supervisor/dispatch/worker_client.py), buys nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import httpx

ABORT_PATH = "/abort_request"
# The tokenizer manager answers an abort at once: a server slower than this is busy or gone.
ABORT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class AbortAnswer:
    """What came of one abort: the server's HTTP status, or why it could not be told."""

    status: int | None = None
    error: str = ""

    @property
    def taken(self) -> bool:
        return self.status == 200


async def abort_request(client: httpx.AsyncClient, base_url: str, rid: str,
                        timeout_s: float = ABORT_TIMEOUT_S) -> AbortAnswer:
    """Ask the server at `base_url` to stop `rid`, within `timeout_s` in all; never raises
    for network trouble (a server that died has nothing left to stop)."""
    try:
        with anyio.fail_after(timeout_s):
            resp = await client.post(base_url + ABORT_PATH,
                                     json={"rid": rid, "abort_all": False}, timeout=timeout_s)
    except (httpx.HTTPError, TimeoutError, OSError, AttributeError) as exc:
        # AttributeError: a connection the dying server closed while it was being opened
        # surfaces from the transport as "'NoneType' object has no attribute 'getpeername'"
        # (seen once in a crash demo, where it escaped and ended the daemon). An abort is
        # best effort: a server gone that way has nothing left to stop.
        return AbortAnswer(error=f"{type(exc).__name__}: {exc}")
    return AbortAnswer(resp.status_code)
