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
from contextlib import asynccontextmanager
from typing import AsyncIterator

import uvicorn

from .batch_slots import BatchSlots
from .child_processes import kill_children, spawn_children
from .faults import FaultState
from .http_api import SimRuntime, build_app
from .options import SimOptions
from .sim_log import log


def _scaled(opts: SimOptions, seconds: float) -> float:
    return seconds / opts.time_scale


async def _lifecycle(rt: SimRuntime) -> None:
    opts = rt.opts
    log(f"Load weight begin. model_path={opts.model_path} tp_size={opts.tp_size} "
        f"mem_fraction_static={opts.mem_fraction_static}", rank="TP0")
    immediate = opts.fault != "none" and opts.fault_after_s is None \
        and opts.fault_after_requests is None
    if immediate and opts.fault != "stall":
        await asyncio.sleep(_scaled(opts, opts.startup_s) / 2)
        rt.faults.apply(opts.fault)       # crash/oom never return; hang never yields again
    await asyncio.sleep(_scaled(opts, opts.startup_s))
    log(f"Memory pool end. max_total_num_tokens={int(opts.mem_fraction_static * 1_000_000)}, "
        f"max_running_requests={opts.max_running_requests}, "
        f"context_len={opts.context_length}", rank="TP0")
    rt.faults.loading = False
    rt.ready = True
    log("The server is fired up and ready to roll!")
    if immediate:
        rt.faults.apply("stall")
    elif opts.fault_after_s is not None and opts.fault != "none":
        await asyncio.sleep(_scaled(opts, opts.fault_after_s))
        rt.faults.apply(opts.fault)


def build_runtime(opts: SimOptions) -> SimRuntime:
    children = spawn_children(opts.children, opts.port) if opts.children else []
    faults = FaultState(empty_rate=opts.empty_rate, children=children)
    return SimRuntime(opts=opts, slots=BatchSlots(opts.max_running_requests), faults=faults)


def serve(opts: SimOptions) -> int:
    rt = build_runtime(opts)

    @asynccontextmanager
    async def lifespan(_app) -> AsyncIterator[None]:
        task = asyncio.create_task(_lifecycle(rt))
        try:
            yield
        finally:
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
