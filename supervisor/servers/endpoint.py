"""What the dispatcher needs to know about one READY server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def _never() -> bool:
    return False


def _unknown() -> float | None:
    return None


@dataclass(frozen=True)
class Endpoint:
    name: str          # "gpu0" (one per GPU or tensor-parallel group)
    base_url: str      # "http://127.0.0.1:30000"
    max_running: int   # the dispatcher keeps this many requests in flight
    # From the server's SGLang /metrics (sglang_monitor.py), where it is read: whether it
    # queues or retracts requests now (a stalled request there requeues without an attempt
    # counted), and when its own decode-token counter last moved (monotonic).
    queueing: Callable[[], bool] = _never
    tokens_at: Callable[[], float | None] = _unknown
