"""How many requests a READY server runs at once, as SGLang itself says.

Without `--max-running-requests`, SGLang sizes the limit from its KV (and mamba) pools at load:
thousands on a big GPU, a handful on a small one -- never a fixed 32. Its `/server_info` says
the figure per data-parallel rank (supervisor/sglang/server_info.py reads it).

With the flag set, the flag is the limit -- unless the server reports fewer (SGLang caps it
by its pools), in which case dispatching more would only queue inside SGLang.

Without the flag SGLang's figure is an estimate (at least 2048 a rank, whatever the pool):
sending that many floods SGLang's queue and our claims. So the figure is bounded by what the
KV pool admits at the job's request size (`kv_bound`): on the CPU server at 700 max tokens
that is 8, where SGLang ran 7. The saturation guard trims what is still too many; the READY
transition and the log say which rule set the figure.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx

from supervisor.config import DispatchSection, ServersSection
from supervisor.servers.launch_command import DEFAULT_MAX_RUNNING, max_running
from supervisor.sglang.server_info import (
    SERVER_INFO_PATH,
    kv_bound,
    read_server_info,
    slots_from_server_info,
)

log = logging.getLogger("supervisor.servers")


@dataclass(frozen=True)
class Slots:
    limit: int
    # "dispatch" (config), "flag", "server" (/server_info), "kv pool" (/server_info's
    # estimate bounded by its KV pool at the job's max tokens), "default"
    source: str
    why: str = ""      # how the figure was found, where a rule of ours set it


async def server_slots(name: str, client: httpx.AsyncClient, base_url: str,
                       servers: ServersSection, dispatch: DispatchSection,
                       max_tokens: int | None = None) -> Slots:
    """The dispatcher's in-flight limit for a server that just became READY (`max_tokens`:
    the job's live max tokens, for the KV pool's bound on SGLang's own estimate)."""
    if dispatch.max_in_flight_per_server > 0:
        return Slots(dispatch.max_in_flight_per_server, "dispatch")
    flag = max_running(servers, dispatch)
    info, why = await read_server_info(client, base_url, servers.health_timeout_s)
    reported = None
    if info is not None:
        reported, why = slots_from_server_info(info)
    if flag is not None:
        if reported is not None and reported < flag:
            log.warning("%s: SGLang runs at most %d requests at once (max-running-requests %d, "
                        "capped by its memory pools); dispatching %d", name, reported, flag,
                        reported)
            return Slots(reported, "server")
        return Slots(flag, "flag")
    if reported is None:
        log.warning("%s: no max-running-requests flag and %s; dispatching %d at once",
                    name, why, DEFAULT_MAX_RUNNING)
        return Slots(DEFAULT_MAX_RUNNING, "default")
    bound, how = kv_bound(info, max_tokens) if max_tokens else (None, "")
    if bound is not None and bound < reported:
        log.warning("%s: SGLang's own estimate is %d requests at once (no max-running-requests)"
                    " but %s: dispatching %d", name, reported, how, bound)
        return Slots(bound, "kv pool", f"SGLang's own estimate is {reported}, but {how}")
    log.info("%s: SGLang runs %d requests at once (%s); dispatching as many", name, reported,
             SERVER_INFO_PATH)
    return Slots(reported, "server")
