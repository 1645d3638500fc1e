"""One simulated server's lifetime: load (503), ready (200), serve, maybe fail, shut down.

Started faults follow what they mean for a real SGLang: `--sim-fault oom` with no trigger is
the classic out-of-memory while allocating the KV pool (a --mem-fraction-static set too
high), so it happens while loading; `crash` and `hang` with no trigger also strike while
loading; `stall` means ready but nothing ever finishes. With --sim-fault-after-s or
--sim-fault-after-requests the fault strikes mid-job instead, which is what a supervisor
mostly has to survive.
"""

from __future__ import annotations

import asyncio
import signal
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

import uvicorn

from .batch_slots import BatchSlots
from .child_processes import kill_children, spawn_children
from .faults import FaultState
from .http_api import SimRuntime, build_app
from .options import SimOptions
from .prom_metrics import SimMetrics, set_prometheus_multiproc_dir
from .sim_log import log


def _scaled(opts: SimOptions, seconds: float) -> float:
    return seconds / opts.time_scale


async def _lifecycle(rt: SimRuntime) -> None:
    opts = rt.opts
    log(f"Load weight begin. model_path={opts.model_path} tp_size={opts.tp_size} "
        f"mem_fraction_static={opts.mem_fraction_static}", rank="TP0")
    immediate = opts.fault not in ("none", "retract") and opts.fault_after_s is None \
        and opts.fault_after_requests is None
    if opts.fault == "retract" and opts.fault_after_s is None \
            and opts.fault_after_requests is None:
        rt.faults.apply("retract")        # pressure from the first batch on
    if immediate and opts.fault != "stall":
        await asyncio.sleep(_scaled(opts, opts.startup_s) / 2)
        rt.faults.apply(opts.fault)       # crash/oom never return; hang never yields again
    await asyncio.sleep(_scaled(opts, opts.startup_s))
    log(f"max_total_num_tokens={opts.max_total_num_tokens}, "
        f"max_running_requests={opts.effective_max_running_requests}, "
        f"context_len={opts.context_length}", rank="TP0")
    if rt.metrics is not None:
        rt.metrics.emit_constants(opts.max_total_num_tokens)
    rt.faults.loading = False
    rt.ready = True
    rt.startup_time = time.time() - rt.started_at
    log("The server is fired up and ready to roll!")
    if immediate:
        rt.faults.apply("stall")
    elif opts.fault_after_s is not None and opts.fault != "none":
        await asyncio.sleep(_scaled(opts, opts.fault_after_s))
        rt.faults.apply(opts.fault)



async def _retraction_ticks(rt: SimRuntime) -> None:
    """While the fault is "retract" (from the start, a trigger or POST /sim/fault): a
    retraction tick every 2 s (scaled) over the running batch. The server keeps answering."""
    while True:
        if rt.faults.fault == "retract":
            rt.retraction.retract()
        else:
            rt.retraction.last_retracted = 0
        await asyncio.sleep(max(0.05, _scaled(rt.opts, 2.0)))


def build_runtime(opts: SimOptions) -> SimRuntime:
    children = spawn_children(opts.children, opts.port) if opts.children else []
    faults = FaultState(empty_rate=opts.empty_rate, children=children)
    metrics = None
    if opts.enable_metrics:
        set_prometheus_multiproc_dir()
        metrics = SimMetrics(opts.model_name, opts.dp_size)
    return SimRuntime(opts=opts, slots=BatchSlots(opts.effective_max_running_requests),
                      faults=faults, metrics=metrics)


def serve(opts: SimOptions) -> int:
    rt = build_runtime(opts)

    @asynccontextmanager
    async def lifespan(_app) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(_lifecycle(rt)), asyncio.create_task(_retraction_ticks(rt))]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            # Here, not after server.run(): uvicorn re-raises SIGTERM once it has shut down,
            # which ends the process before any code after run() would execute.
            kill_children(rt.faults.children)

    app = build_app(rt, lifespan=lifespan)
    # A short graceful window: SGLang exits promptly on SIGTERM, and a stalled batch would
    # otherwise hold uvicorn's shutdown open forever.
    config = uvicorn.Config(app, host=opts.host, port=opts.port, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=1, lifespan="on",
                            timeout_keep_alive=30)
    server = uvicorn.Server(config)
    try:
        server.run()
    finally:
        kill_children(rt.faults.children)
    if not server.started:
        return 1                          # e.g. the port was taken: uvicorn said why
    return 0


def main(argv: list[str]) -> int:
    from .options import parse_options
    opts = parse_options(argv)
    # Ignore SIGHUP from a closing terminal like a daemonised server would; SIGTERM/SIGINT
    # are uvicorn's (graceful stop).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log(f"server_args={opts.server_args()}")
    return serve(opts)
