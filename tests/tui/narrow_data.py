"""Fixed status data for the 80-column tests: the demo's fleet as `demo --tui` shows it (no
GPU driver, SGLang's figures on, one server draining for a restart, one back from an OOM),
and an 8-GPU node with full GPU figures and a FAILED server."""

from __future__ import annotations

from dataclasses import replace

from supervisor.contract.status import Gpus, ServerState, ServerStatus, Status
from tests.fixtures import tui_status_data as data

OOM = "oom: CUDA out of memory. Tried to allocate 2.00 GiB"


def _demo_server(i: int) -> ServerStatus:
    s = replace(data.server(i), in_flight=32, max_running=32, req_per_s=14.5 + i,
                sglang_metrics=True, sglang_running=32, sglang_queued=0,
                token_usage=0.11, restarts=0, last_exit_reason=None,
                uptime_s=3 * 60 + 7 + i)
    if i == 1:
        # Draining for an operator's restart: still serving what it holds.
        return replace(s, state=ServerState.DRAINING, state_reason="restart requested by root",
                       in_flight=9, uptime_s=3 * 60 + 11)
    if i == 2:
        return replace(s, restarts=1, last_exit_reason=OOM, uptime_s=41.0)
    return s


def demo_fleet() -> Status:
    s = data.healthy(servers=3)
    return replace(s, model="demo-sim", servers=tuple(_demo_server(i) for i in range(3)),
                   gpus=Gpus(available=False, reason="NVML unavailable: NVML Shared Library "
                             "Not Found", sampled_at=None))


def node_with_failure() -> Status:
    return data.with_failed_server()
