"""The long-batch probe: before a candidate is kept, a full batch of the job's longest prompts
at the live max tokens must go through the canary without an error or a crash.

Why: an SGLang started with a larger memory fraction or more running requests can serve a
window of ordinary answers well and still run out of memory the first time its batch is full
of long prompts that all decode to the limit (KV use peaks only then) - at 3 a.m., hours after
the tuner kept the flags. The window rarely sees that batch; the probe makes it.

The probe's requests go straight to the canary (the fleet's HTTP client), beside the job's own
requests, and their answers are thrown away: they are never recorded, so the output's
exactly-once is untouched and no prompt's attempts move. The tokens they decoded are GPU time
the job paid for, so the tuner books them in the waste ledger as `probe` (as SGLang counted
them in each answer's usage; a request that failed gave no count and books nothing). `ignore_eos` (a sampling extension
SGLang's ChatCompletionRequest accepts) makes every answer decode to the limit, the worst
case the job can produce.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from supervisor.config import GenerationSection
from supervisor.sglang.chat_request import CHAT_PATH, JSON_HEADERS, request_body


def probe_bodies(prompts: Sequence[list[dict[str, Any]]], slots: int, model: str,
                 gen: GenerationSection, max_tokens: int) -> list[dict[str, Any]]:
    """`slots` requests (enough to fill the canary's batch), cycling through the longest
    prompts when the job has fewer than that."""
    if not prompts or slots < 1:
        return []
    bodies = []
    for i in range(slots):
        body = request_body(model, list(prompts[i % len(prompts)]), gen, max_tokens)
        body["ignore_eos"] = True
        bodies.append(body)
    return bodies


@dataclass(frozen=True)
class ProbeResult:
    failure: str | None          # None: every request answered 200
    tokens: int                  # completion tokens the answers said they decoded
    answered: int                # answers that came back 200


async def run_probe(client: httpx.AsyncClient, base_url: str, bodies: list[dict[str, Any]],
                    timeout_s: float, left_ready: Callable[[], str | None]) -> ProbeResult:
    """Sends every body at once. `failure` is None when all answered 200, else the first
    failure's one line (an error status, a lost connection, the server leaving READY, the
    time limit)."""
    failures: list[str] = []
    counted = [0, 0]             # tokens, answers

    async def one(body: dict[str, Any]) -> None:
        try:
            resp = await client.post(base_url + CHAT_PATH, content=json.dumps(body),
                                     headers=JSON_HEADERS, timeout=timeout_s)
        except httpx.HTTPError as exc:
            failures.append(f"{type(exc).__name__}: {exc}"[:300])
            return
        if resp.status_code != 200:
            failures.append(f"HTTP {resp.status_code}: {resp.text[:200]}")
            return
        counted[0] += completion_tokens(resp)
        counted[1] += 1

    async def watch(scope: anyio.CancelScope) -> None:
        while True:
            gone = left_ready()
            if gone is not None:
                failures.append(gone)
                scope.cancel()
                return
            await anyio.sleep(0.2)

    with anyio.move_on_after(timeout_s) as limit:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, tg.cancel_scope)
            async with anyio.create_task_group() as sends:
                for body in bodies:
                    sends.start_soon(one, body)
            tg.cancel_scope.cancel()
    failure = None
    if limit.cancelled_caught:
        failure = f"a full batch of {len(bodies)} did not finish within {timeout_s:g} s"
    elif failures:
        failure = f"{len(failures)} of {len(bodies)} failed: {failures[0]}"
    return ProbeResult(failure, *counted)


def completion_tokens(resp: httpx.Response) -> int:
    """The answer's `usage.completion_tokens`; 0 where a server left it out or sent
    something else (the probe's verdict is the status code, not this count)."""
    try:
        n = resp.json()["usage"]["completion_tokens"]
    except (ValueError, KeyError, TypeError):
        return 0
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 0
