"""Retraction: what SGLang's scheduler does when the KV pool runs out mid-decode.

It takes some running requests back to the waiting queue, logs one warning and counts them
(`sglang/srt/managers/scheduler.py`, the "KV cache pool is full. Retract requests." line;
`sglang/srt/observability/metrics_collector.py` increment_retracted_reqs). The server keeps
serving: a retraction is pressure, not a failure, and a supervisor must not read it as one.
`--sim-fault retract` reproduces it so the daemon's exit classification and its
over-commit flag can be tested against the real lines and metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .batch_slots import BatchSlots
from .sim_log import log_err

if TYPE_CHECKING:
    from .prom_metrics import SimMetrics


class Retraction:
    def __init__(self, slots: BatchSlots, metrics: SimMetrics | None) -> None:
        self.slots = slots
        self.metrics = metrics
        self.last_retracted = 0          # the sglang:num_retracted_reqs gauge (last tick)
        self.total = 0
        self._ratio = 0.7

    def retract(self) -> int:
        """One retraction tick over the running batch: about an eighth of it, at least one
        request, when anything runs. Returns how many were retracted."""
        s = self.slots.stats
        if s.running == 0:
            self.last_retracted = 0
            return 0
        n = max(1, s.running // 8)
        per_req = s.kv_tokens // max(1, s.running)
        gained = n * per_req
        old, self._ratio = self._ratio, min(1.0, self._ratio + 0.05)
        # SGLang's exact wording and field order (logger.warning in the scheduler, stderr).
        log_err(f"KV cache pool is full. Retract requests. #retracted_reqs: {n}, "
                f"#new_tokens_gained: {gained}, #new_token_ratio: {old:.4f} -> "
                f"{self._ratio:.4f}", rank="TP0")
        self.last_retracted = n
        self.total += n
        if self.metrics is not None:
            self.metrics.retracted(n, gained // 2, gained - gained // 2)
        return n
