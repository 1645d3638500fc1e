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
    max_running: int   # what SGLang runs at once: the dispatcher's slots
    # Requests kept waiting in SGLang's queue on top (dispatch.queue_ahead; 0 where the
    # operator fixed the in-flight count: dispatch.max_in_flight_per_server).
    queue_ahead: int = 0
    # From the server's SGLang /metrics (sglang_monitor.py), where it is read: whether it
    # queues or retracts requests now (a stalled request there requeues without an attempt
    # counted), and when its own decode-token counter last moved (monotonic).
    queueing: Callable[[], bool] = _never
    tokens_at: Callable[[], float | None] = _unknown
