"""Probing SGLang's /health_generate: 200 only when the server can actually generate.

(/health answers as soon as the HTTP front end is up; /health_generate,
`sglang/srt/entrypoints/http_server.py:722`, runs a one-token generation, so it stays 503
through warmup.) Before that, real SGLang does not listen at all:
the HTTP server starts only after the schedulers have loaded the model and reported ready
(`sglang/srt/entrypoints/http_server.py` launch_server: `Engine._launch_subprocesses`, which
waits for them, then the uvicorn server). So while STARTING a refused connection means "still
loading", like a 503, until the startup timeout; only a READY server's refusal is a failure.

A READY server's /health_generate is slow when it is loaded: SGLang 0.5.23 sends a one-token
request and waits up to 20 s for its scheduler to make progress before it answers 503
(`sglang/srt/entrypoints/http_server.py:218` HEALTH_CHECK_TIMEOUT, the loop at :779). So
the probe's timeout (servers.health_timeout_s, 30 s by default) is above those 20 s: a
shorter one fails a busy server that SGLang itself still calls healthy.

Spoken with httpx, the client of the daemon's few requests to SGLang (abort.py says why).
"""

from __future__ import annotations

import httpx

HEALTH_PATH = "/health_generate"
NOT_LISTENING = "not accepting connections"
NO_ANSWER = "no answer within"


async def probe(client: httpx.AsyncClient, base_url: str, timeout_s: float) -> tuple[bool, str]:
    """(healthy, what happened) — never raises for network trouble."""
    try:
        resp = await client.get(base_url + HEALTH_PATH, timeout=timeout_s)
    except httpx.TimeoutException:
        return False, f"{NO_ANSWER} {timeout_s:g} s"
    except httpx.ConnectError as exc:
        return False, f"{NOT_LISTENING} ({exc})" if str(exc) else NOT_LISTENING
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if resp.status_code == 200:
        return True, "200"
    return False, f"HTTP {resp.status_code}"
