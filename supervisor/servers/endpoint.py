"""What the dispatcher needs to know about one READY server."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    name: str          # "gpu0" (one per GPU or tensor-parallel group)
    base_url: str      # "http://127.0.0.1:30000"
    max_running: int   # the dispatcher keeps this many requests in flight
