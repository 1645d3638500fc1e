"""Retraction as the outside sees it: SGLang's log line and metrics.

When the KV pool runs out mid-decode (kv_pool.py decides when, and whom), SGLang's scheduler
takes requests back to the waiting queue, logs one warning and counts them
(`sglang/srt/managers/scheduler.py`:4526, the "KV cache pool is full. Retract requests."
line; `sglang/srt/observability/metrics_collector.py` increment_retracted_reqs; the
sglang:num_retracted_reqs gauge is the last step's count). The server keeps serving: a
retraction is pressure, not a failure, and a supervisor must not read it as one.
`--sim-fault retract` forces a retraction every 2 s (scaled) whatever the pool holds, so the
daemon's exit classification and its over-commit flag can be tested against the real lines
and metrics without filling a pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .kv_pool import Retracted
from .sim_log import log_err

if TYPE_CHECKING:
    from .batch_slots import BatchSlots
    from .prom_metrics import SimMetrics


class Retraction:
    def __init__(self, slots: BatchSlots, metrics: SimMetrics | None) -> None:
        self.slots = slots
        self.metrics = metrics
        self.last_retracted = 0          # the sglang:num_retracted_reqs gauge (last tick)
        self.total = 0
        slots.pool.on_retract = self.record

    def record(self, event: Retracted) -> None:
        # SGLang's exact wording and field order (logger.warning in the scheduler, stderr).
        log_err(f"KV cache pool is full. Retract requests. #retracted_reqs: {event.reqs}, "
                f"#new_tokens_gained: {event.tokens_gained}, #new_token_ratio: "
                f"{event.old_ratio:.4f} -> {event.new_ratio:.4f}", rank="TP0")
        self.last_retracted = event.reqs
        self.total += event.reqs
        if self.metrics is not None:
            self.metrics.retracted(event.reqs, event.input_tokens, event.output_tokens)

    def retract(self) -> int:
        """A forced retraction (the "retract" fault): about an eighth of the running batch,
        at least one request, when any runs. Returns how many were retracted."""
        running = len(self.slots.pool.running)
        event = self.slots.pool.retract(at_least=max(1, running // 8), keep=0)
        if event is None:
            self.last_retracted = 0
            return 0
        self.slots.pool.admit()
        return event.reqs
