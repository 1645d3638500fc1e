"""Small helpers the simulator's fidelity tests (test_sglang_fidelity_*.py) share: plain HTTP
calls to a simulated server and SGLang's label sets (not a test module)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

# `sglang/srt/observability/metrics_collector.py`: the scheduler collector's labels (rank 0)
# and the tokenizer manager's.
SCHED_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
TOKENIZER_LABELS = {"model_name", "engine_type", "is_streaming"}
# A request that thinks, its trace split out (with --reasoning-parser).
THINK = {"separate_reasoning": True, "chat_template_kwargs": {"enable_thinking": True}}


def get(base: str, path: str) -> httpx.Response:
    return httpx.get(base + path, timeout=10, trust_env=False)


def chat(base: str, content: str = "Name three rivers.", **extra) -> httpx.Response:
    body = {"model": "sim/test-model", "messages": [{"role": "user", "content": content}],
            **extra}
    return httpx.post(base + "/v1/chat/completions", json=body, timeout=30, trust_env=False)


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def sse_events(lines: Iterable[str]) -> list[Any]:
    """A stream's data lines, parsed ("[DONE]" kept as the string)."""
    out: list[Any] = []
    for line in lines:
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out
