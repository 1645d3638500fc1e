"""The answers a dead daemon left in flight on a server that outlived it: aborted on that
server by their request ids, so no slot burns on an answer nobody will read.

They were requeued when the new daemon opened the state DB (no attempt counted: the prompt
did nothing wrong), so they run again elsewhere or later; the abort only frees the server.
SGLang drops a streamed request whose client went away, so after a SIGKILL on loopback most
are gone already; the abort is for those it still holds (a connection it has not seen close,
a disconnect it notices late). An id it does not hold is ignored (SGLang 0.5.23
`srt/managers/tokenizer_manager.py` abort_request), so naming all of them is safe.
"""

from __future__ import annotations

import logging

import anyio
import httpx

from state.records import InFlightClaim
from supervisor.dispatch.request_ids import request_id

log = logging.getLogger("supervisor.servers")

# Aborts sent at once: a node's 8 servers x 256 slots is a few thousand short POSTs.
CONCURRENCY = 16


async def abort_left(name: str, client: httpx.AsyncClient, base_url: str,
                     left: list[InFlightClaim], timeout_s: float = 10.0) -> int:
    """POST /abort_request {"rid": ...} for each claim (SGLang 0.5.23
    `srt/entrypoints/http_server.py` abort_request). How many the server took (200); one
    log line for them all."""
    if not left:
        return 0
    told = 0
    limiter = anyio.CapacityLimiter(CONCURRENCY)

    async def one(claim: InFlightClaim) -> None:
        nonlocal told
        async with limiter:
            try:
                r = await client.post(f"{base_url}/abort_request",
                                      json={"rid": request_id(claim), "abort_all": False},
                                      timeout=timeout_s)
            except httpx.HTTPError:
                return
            if r.status_code == 200:
                told += 1

    async with anyio.create_task_group() as tg:
        for claim in left:
            tg.start_soon(one, claim)
    log.info("%s: aborted %d of the %d answers the earlier daemon left in flight here "
             "(requeued at start, no attempt counted)", name, told, len(left))
    return told
