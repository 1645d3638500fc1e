"""The event loop the daemon's job runs on: uvloop where it is installed.

Every streamed chunk is an event-loop wake-up: the socket's readiness, its read, the
response parser's callback, the waiting task's resumption. At SGLang's default
`--stream-interval 1` that is one per generated token, and asyncio's own loop (selector,
transport and handles in Python) was about a third of the daemon's CPU per chunk; uvloop runs
the same loop in C (libuv) under the same asyncio API, so nothing above it changes
(benchmarks/bench_stream_cpu.py). It comes with uvicorn's standard extras, which the control
socket's server already needs. `DFLASH_UVLOOP=0` runs the standard loop (a fallback an
operator can choose without a new build, should uvloop ever misbehave on a node).
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("supervisor")

ENV = "DFLASH_UVLOOP"


def backend_options() -> dict[str, Any]:
    """anyio.run's backend_options for the asyncio backend."""
    if os.environ.get(ENV, "1").strip() == "0":
        return {}
    try:
        import uvloop  # noqa: F401
    except ImportError:
        log.info("uvloop is not installed: the daemon runs on asyncio's own event loop")
        return {}
    return {"use_uvloop": True}
