"""Probing SGLang's /health_generate: 200 only when the server can actually generate.

(/health answers as soon as the HTTP front end is up; /health_generate runs a one-token
generation, so it stays 503 through model load and CUDA graph capture.)
"""

from __future__ import annotations

import httpx

HEALTH_PATH = "/health_generate"


async def probe(client: httpx.AsyncClient, base_url: str, timeout_s: float) -> tuple[bool, str]:
    """(healthy, what happened) — never raises for network trouble."""
    try:
        resp = await client.get(base_url + HEALTH_PATH, timeout=timeout_s)
    except httpx.TimeoutException:
        return False, f"no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if resp.status_code == 200:
        return True, "200"
    return False, f"HTTP {resp.status_code}"
