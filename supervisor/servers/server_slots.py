"""How many requests a READY server runs at once, as SGLang itself says.

Without `--max-running-requests`, SGLang sizes the limit from its KV (and mamba) pools at load:
thousands on a big GPU, a handful on a small one -- never a fixed 32. Its `/server_info`
(`sglang/srt/entrypoints/http_server.py` server_info) carries one `internal_states` entry per
data-parallel rank that answered, each with `effective_max_running_requests_per_dp`
(`sglang/srt/managers/scheduler_components/internal_state.py`, the scheduler's own
max_running_requests). A rank's share is the flag divided by the attention-DP width
(`sglang/srt/model_executor/pool_configurator.py`), so the server's total is the sum over its
DP ranks (`num_dp_ranks` = dp_size × attn_dp_size, `sglang/srt/runtime_context.py`).

With the flag set, the flag is the limit -- unless the server reports fewer (SGLang caps it
by its pools), in which case dispatching more would only queue inside SGLang.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx

from supervisor.config import DispatchSection, ServersSection
from supervisor.servers.launch_command import DEFAULT_MAX_RUNNING, max_running

log = logging.getLogger("supervisor.servers")

SERVER_INFO_PATH = "/server_info"
PER_DP_KEY = "effective_max_running_requests_per_dp"


@dataclass(frozen=True)
class Slots:
    limit: int
    source: str        # "dispatch" (config), "flag", "server" (/server_info), "default"


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def slots_from_server_info(info: Any) -> tuple[int | None, str]:
    """(the server's limit, "") or (None, why it cannot be read from this answer)."""
    if not isinstance(info, dict):
        return None, f"{SERVER_INFO_PATH} is not a JSON object"
    states = info.get("internal_states")
    if not isinstance(states, list) or not states:
        return None, f"{SERVER_INFO_PATH} has no internal_states"
    values = [_positive_int(s.get(PER_DP_KEY)) if isinstance(s, dict) else None for s in states]
    if any(v is None for v in values):
        return None, f"{SERVER_INFO_PATH} internal_states carry no {PER_DP_KEY}"
    per_rank: list[int] = [v for v in values if v is not None]
    dp = _positive_int(info.get("dp_size")) or 1
    ranks = dp * (_positive_int(info.get("attn_dp_size")) or 1)
    if len(per_rank) >= ranks:
        return sum(per_rank), ""
    # Fewer answers than ranks (one per attention-DP group answers for its ranks): the
    # ranks are alike, so one rank's share times their number.
    return min(per_rank) * ranks, ""


async def read_server_slots(client: httpx.AsyncClient, base_url: str,
                            timeout_s: float) -> tuple[int | None, str]:
    """Never raises for network trouble or an odd answer: (None, what went wrong)."""
    try:
        resp = await client.get(base_url + SERVER_INFO_PATH, timeout=timeout_s)
    except httpx.TimeoutException:
        return None, f"{SERVER_INFO_PATH} did not answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return None, f"{SERVER_INFO_PATH}: {type(exc).__name__}: {exc}"
    if resp.status_code != 200:
        return None, f"{SERVER_INFO_PATH} answered HTTP {resp.status_code}"
    try:
        info = resp.json()
    except ValueError:
        return None, f"{SERVER_INFO_PATH} did not answer JSON"
    return slots_from_server_info(info)


async def server_slots(name: str, client: httpx.AsyncClient, base_url: str,
                       servers: ServersSection, dispatch: DispatchSection) -> Slots:
    """The dispatcher's in-flight limit for a server that just became READY."""
    if dispatch.max_in_flight_per_server > 0:
        return Slots(dispatch.max_in_flight_per_server, "dispatch")
    flag = max_running(servers, dispatch)
    reported, why = await read_server_slots(client, base_url, servers.health_timeout_s)
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
    log.info("%s: SGLang runs %d requests at once (%s); dispatching as many", name, reported,
             SERVER_INFO_PATH)
    return Slots(reported, "server")
