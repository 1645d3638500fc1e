"""SGLang 0.5.23's `/server_info`, read for how many requests a server runs at once.

Its `/server_info` (`sglang/srt/entrypoints/http_server.py:863` server_info) carries one
`internal_states` entry per data-parallel rank that answered, each with
`effective_max_running_requests_per_dp`
(`sglang/srt/managers/scheduler_components/internal_state.py`, the scheduler's own
max_running_requests). A rank's share is the flag divided by the attention-DP width
(`sglang/srt/model_executor/pool_configurator.py`), so the server's total is the sum over its
DP ranks (`num_dp_ranks` = dp_size × attn_dp_size, `sglang/srt/runtime_context.py`).

Without `--max-running-requests` SGLang 0.5.23 says `max_running_requests: null` and its
per-rank figure is an estimate from the pool and the context length, clamped to at least 2048
(`sglang/srt/mem_cache/kv_cache_configurator.py` resolve_max_num_reqs): 2048 on the CPU
server's 4096-token pool. What the KV pool admits at the job's request size bounds it: SGLang
reserves for each admitted request its max new tokens times its new-token ratio, 0.7 at
first (`sglang/srt/environ.py:646` SGLANG_INIT_NEW_TOKEN_RATIO; schedule_policy.py
PrefillAdder), so a rank's pool (`internal_states[i].memory_usage.token_capacity`, else
`max_total_num_tokens`) holds pool // (0.7 x max tokens) of them (`kv_bound`).

The same answer carries the server's own arguments, flat (`server_args.resolved_dict()`,
`sglang/srt/utils/common.py` build_server_info), among them `reasoning_parser`
(`sglang/srt/arg_groups/fields/serving.py:208`): null when the server was started without
`--reasoning-parser` (`reasoning_parser_of`; seen on the real 0.5.23 CPU server both ways).

Spoken with httpx, the client of the daemon's few requests to SGLang (abort.py says why).
"""

from __future__ import annotations

from typing import Any

import httpx

SERVER_INFO_PATH = "/server_info"
PER_DP_KEY = "effective_max_running_requests_per_dp"
# SGLang's first new-token ratio (sglang/srt/environ.py:646): the share of a request's max
# new tokens its admission reserves in the KV pool.
NEW_TOKEN_RATIO = 0.7


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


def _pool_tokens(info: dict[str, Any], state: Any) -> int | None:
    usage = state.get("memory_usage") if isinstance(state, dict) else None
    capacity = usage.get("token_capacity") if isinstance(usage, dict) else None
    return _positive_int(capacity) or _positive_int(info.get("max_total_num_tokens"))


def kv_bound(info: Any, max_tokens: int) -> tuple[int | None, str]:
    """(what the KV pool admits at `max_tokens` a request, how) when SGLang runs without a
    max-running-requests of its own (`max_running_requests` null), else (None, "")."""
    if not isinstance(info, dict) or info.get("max_running_requests") is not None:
        return None, ""
    states = info.get("internal_states")
    if not isinstance(states, list) or not states or max_tokens < 1:
        return None, ""
    per_request = max(1, round(NEW_TOKEN_RATIO * max_tokens))
    pools = [_pool_tokens(info, s) for s in states]
    if any(p is None for p in pools):
        return None, ""
    per_rank = [max(1, p // per_request) for p in pools if p is not None]
    dp = _positive_int(info.get("dp_size")) or 1
    ranks = dp * (_positive_int(info.get("attn_dp_size")) or 1)
    total = sum(per_rank) if len(per_rank) >= ranks else min(per_rank) * ranks
    pool = min(p for p in pools if p is not None)
    return total, (f"its KV pool of {pool} tokens holds {max(1, pool // per_request)} "
                   f"requests at {max_tokens} max tokens ({NEW_TOKEN_RATIO:g} of them "
                   f"reserved each)" + (f", x {ranks} ranks" if ranks > 1 else ""))


def reasoning_parser_of(info: Any) -> tuple[str | None, str]:
    """(the server's reasoning parser or None, "") or (None, why the answer does not say)."""
    if not isinstance(info, dict):
        return None, f"{SERVER_INFO_PATH} is not a JSON object"
    if "reasoning_parser" not in info:
        return None, f"{SERVER_INFO_PATH} carries no reasoning_parser argument"
    parser = info["reasoning_parser"]
    if parser is None or parser == "":
        return None, ""
    if not isinstance(parser, str):
        return None, f"{SERVER_INFO_PATH} reasoning_parser is {parser!r}, not a name"
    return parser, ""


def read_server_info_now(base_url: str, timeout_s: float) -> tuple[Any, str]:
    """`read_server_info` for a command before any event loop runs (the start, `check`)."""
    try:
        # As the dispatcher's client: a proxy from the environment never carries it.
        resp = httpx.get(base_url + SERVER_INFO_PATH, timeout=timeout_s, trust_env=False)
    except httpx.HTTPError as exc:
        return None, _failed(exc, timeout_s)
    return _parsed(resp)


def _failed(exc: httpx.HTTPError, timeout_s: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"{SERVER_INFO_PATH} did not answer within {timeout_s:g} s"
    return f"{SERVER_INFO_PATH}: {type(exc).__name__}: {exc}"


def _parsed(resp: httpx.Response) -> tuple[Any, str]:
    if resp.status_code != 200:
        return None, f"{SERVER_INFO_PATH} answered HTTP {resp.status_code}"
    try:
        return resp.json(), ""
    except ValueError:
        return None, f"{SERVER_INFO_PATH} did not answer JSON"


async def read_server_info(client: httpx.AsyncClient, base_url: str,
                           timeout_s: float) -> tuple[Any, str]:
    """(the parsed answer, "") or (None, what went wrong); never raises."""
    try:
        resp = await client.get(base_url + SERVER_INFO_PATH, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return None, _failed(exc, timeout_s)
    return _parsed(resp)


async def read_server_slots(client: httpx.AsyncClient, base_url: str,
                            timeout_s: float) -> tuple[int | None, str]:
    """Never raises for network trouble or an odd answer: (None, what went wrong)."""
    info, why = await read_server_info(client, base_url, timeout_s)
    if info is None:
        return None, why
    return slots_from_server_info(info)
