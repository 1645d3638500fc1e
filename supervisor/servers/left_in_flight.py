"""The answers a dead daemon left in flight on a server that outlived it: aborted on that
server by their request ids, so no slot burns on an answer nobody will read.

They were requeued when the new daemon opened the state DB (no attempt counted: the prompt
did nothing wrong), so they run again elsewhere or later; the abort only frees the server.
SGLang drops a streamed request whose client went away, so after a SIGKILL on loopback most
are gone already; the abort is for those it still holds (a connection it has not seen close,
a disconnect it notices late). An id it does not hold is ignored (supervisor/sglang/abort.py),
so naming all of them is safe.
"""

from __future__ import annotations

import logging

import anyio
import httpx

from state.records import InFlightClaim
from supervisor.sglang.abort import abort_request
from supervisor.sglang.request_ids import request_id

log = logging.getLogger("supervisor.servers")

# Aborts sent at once: a node's 8 servers x 256 slots is a few thousand short POSTs.
CONCURRENCY = 16


async def abort_left(name: str, client: httpx.AsyncClient, base_url: str,
                     left: list[InFlightClaim], timeout_s: float = 10.0) -> int:
    """Abort each claim's request by its id. How many the server took (200); one log line
    for them all."""
    if not left:
        return 0
    told = 0
    limiter = anyio.CapacityLimiter(CONCURRENCY)

    async def one(claim: InFlightClaim) -> None:
        nonlocal told
        async with limiter:
            if (await abort_request(client, base_url, request_id(claim), timeout_s)).taken:
                told += 1

    async with anyio.create_task_group() as tg:
        for claim in left:
            tg.start_soon(one, claim)
    log.info("%s: aborted %d of the %d answers the earlier daemon left in flight here "
             "(requeued at start, no attempt counted)", name, told, len(left))
    return told
