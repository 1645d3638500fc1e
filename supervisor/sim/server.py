"""One simulated server's lifetime, in SGLang 0.5.23's order
(`sglang/srt/entrypoints/http_server.py` launch_server, _wait_and_warmup):

1. loading (--sim-startup-s): weights, KV pool, CUDA graphs. The HTTP server is not started
   yet, so the port refuses connections;
2. warmup: the HTTP server is up but the tokenizer manager's status is Starting, so /health
   and /health_generate answer 503 while one warmup request runs (~1 s: the warmup thread
   sleeps 1 s before its first request); `--skip-server-warmup` skips it;
3. up: "The server is fired up and ready to roll!", health answers 200 (each probe taking
   >= 1 s, see http_api.py).

Started faults follow what they mean for a real SGLang: `--sim-fault oom` with no trigger is
the classic out-of-memory while allocating the KV pool (a --mem-fraction-static set too
high), so it happens while loading; `crash` and `hang` with no trigger also strike while
loading; `stall` means ready but nothing ever finishes; `collapse` ready but decoding slowly;
`retract` is KV-pool pressure from the start. With --sim-fault-after-s or
--sim-fault-after-requests the fault strikes mid-job instead, which is what a supervisor
mostly has to survive.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from .batch_slots import BatchSlots
from .child_processes import kill_children, spawn_children
from .decode_meter import DecodeMeter
from .faults import OOM_GRAPHS, FaultState, oom
from .http_api import SimRuntime, build_app
from .options import SimOptions
from .prom_metrics import SimMetrics, set_prometheus_multiproc_dir
from .sim_log import log

# The warmup request (`http_server.py` _execute_server_warmup): text "The capital city of
# France is" (6 tokens), 8 new tokens; it goes through the tokenizer manager's counters.
_WARMUP_PROMPT_TOKENS, _WARMUP_NEW_TOKENS = 6, 8


def _scaled(opts: SimOptions, seconds: float) -> float:
    return seconds / opts.time_scale


def _immediate(opts: SimOptions) -> bool:
    """A started fault with no trigger."""
    return opts.fault_after_s is None and opts.fault_after_requests is None


async def _load(rt: SimRuntime) -> None:
    """Phase 1, before the port is open."""
    opts = rt.opts
    avail = opts.memory.total_gb if opts.memory is not None else 139.21
    log(f"Load weight begin. avail mem={avail:.2f} GB", rank="TP0")
    if opts.fault == "retract" and _immediate(opts):
        rt.faults.apply("retract")        # pressure from the first batch on
    elif opts.fault not in ("none", "stall", "retract", "collapse") and _immediate(opts):
        await asyncio.sleep(_scaled(opts, opts.startup_s) / 2)
        rt.faults.apply(opts.fault)       # crash/oom never return; hang never yields again
    await asyncio.sleep(_scaled(opts, opts.startup_s))
    _memory_at_load(rt)
    log(f"max_total_num_tokens={opts.max_total_num_tokens}, "
        f"chunked_prefill_size={opts.chunked_prefill_size}, max_prefill_tokens=16384, "
        f"max_running_requests={opts.effective_max_running_requests}, "
        f"context_len={opts.context_length}, available_gpu_mem=12.41 GB", rank="TP0")
    if rt.metrics is not None:
        rt.metrics.emit_constants(opts.max_total_num_tokens)


def _memory_at_load(rt: SimRuntime) -> None:
    """The flag-response model's verdict on the memory flags (flag_response.py): an OOM
    that ends the load, or the Mamba cap's warning, logged where SGLang logs it (while the
    scheduler sizes its pools, before the port opens)."""
    opts = rt.opts
    failure = opts.memory.load_failure(opts.mem_fraction_static) if opts.memory else None
    if failure is not None:
        oom(rt.faults.children, during_load=True,
            text=OOM_GRAPHS if failure == "graphs" else None)
    if opts.mamba_capped:
        log(opts.mamba.warning(opts.effective_max_running_requests), rank="TP0")
    elif (opts.max_running_requests is not None
          and opts.effective_max_running_requests < opts.max_running_requests):
        # kv_cache_configurator.py:3157: the pool holds fewer than asked (half its tokens).
        log(f"max_running_requests was reduced from the requested {opts.max_running_requests} "
            f"to {opts.effective_max_running_requests} (per dp worker) due to the available "
            "KV cache capacity.", rank="TP0")


def _oom_on_full_batch(rt: SimRuntime) -> None:
    """A batch past the memory budget's worst case dies on its first forward pass, with
    torch's CUDA out of memory (the OOM that comes only with the first long batch)."""
    running = [(s.prompt_tokens, s.max_new_tokens) for s in rt.slots.pool.running]
    if rt.opts.batch_ooms(running):
        rt.faults.apply("oom")


async def _warmup_then_up(rt: SimRuntime) -> None:
    """Phases 2 and 3, once the HTTP server runs; then any timed fault."""
    opts = rt.opts
    rt.faults.loading = False
    if not opts.skip_server_warmup:
        await asyncio.sleep(_scaled(opts, 1.0))
        if rt.metrics is not None:
            for _ in range(opts.dp_size):
                rt.metrics.finished_request(_WARMUP_PROMPT_TOKENS, _WARMUP_NEW_TOKENS)
    rt.ready = True
    rt.startup_time = time.time() - rt.started_at
    log("The server is fired up and ready to roll!")
    if opts.fault in ("stall", "collapse") and _immediate(opts):
        rt.faults.apply(opts.fault)
    elif opts.fault_after_s is not None and opts.fault != "none":
        await asyncio.sleep(_scaled(opts, opts.fault_after_s))
        rt.faults.apply(opts.fault)


async def _scheduler_ticks(rt: SimRuntime) -> None:
    """The scheduler's loop, coarsely: every 20 ms (real time) retract if the next decode
    step does not fit the KV pool, then admit what fits (kv_pool.py)."""
    while True:
        rt.slots.tick()
        _oom_on_full_batch(rt)
        await asyncio.sleep(0.02)


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
    faults = FaultState(empty_rate=opts.empty_rate, children=children,
                        stall_share=opts.stall_share, error_share=opts.error_share,
                        collapse_factor=opts.collapse_factor)
    metrics = None
    if opts.enable_metrics:
        set_prometheus_multiproc_dir()
        metrics = SimMetrics(opts.model_name, opts.dp_size)
    meter = DecodeMeter(opts.tokens_per_s, opts.time_scale, instant=opts.instant,
                        batch_knee=opts.batch_knee, batch_peak=opts.batch_peak)
    # One scheduler per DP rank, each with its own slots (hence "_per_dp" in /server_info)
    # and its own KV pool: one shared queue over dp_size pools' worth, a simplification.
    slots = BatchSlots(opts.effective_max_running_requests * opts.dp_size,
                       capacity=opts.max_total_num_tokens * opts.dp_size, steps=meter.steps)
    return SimRuntime(opts=opts, slots=slots, faults=faults, metrics=metrics, meter=meter)


def _die_with_children(rt: SimRuntime) -> Any:
    """SIGTERM/SIGINT while loading (uvicorn's handlers are not installed yet): take the
    children down, then die of the signal as an unhandled one would."""
    def handler(signum: int, _frame: Any) -> None:
        kill_children(rt.faults.children)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    return handler


async def _run(rt: SimRuntime) -> bool:
    opts = rt.opts
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _die_with_children(rt))
    await _load(rt)

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(_warmup_then_up(rt)),
                 asyncio.create_task(_retraction_ticks(rt)),
                 asyncio.create_task(_scheduler_ticks(rt))]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            # Here, not after serve(): uvicorn re-raises SIGTERM once it has shut down,
            # which ends the process before any code after it would execute.
            kill_children(rt.faults.children)

    # A short graceful window: a stalled batch would otherwise hold uvicorn's shutdown open
    # forever. (Real SGLang drains in-flight requests on SIGTERM; the daemon escalates to
    # SIGKILL after its own grace period either way.)
    config = uvicorn.Config(build_app(rt, lifespan=lifespan), host=opts.host, port=opts.port,
                            log_level="warning", access_log=False, timeout_graceful_shutdown=1,
                            lifespan="on", timeout_keep_alive=30)
    server = uvicorn.Server(config)
    await server.serve()                  # installs uvicorn's own SIGTERM/SIGINT handling
    return server.started


def serve(opts: SimOptions) -> int:
    rt = build_runtime(opts)
    try:
        started = asyncio.run(_run(rt))
    finally:
        kill_children(rt.faults.children)
    return 0 if started else 1            # not started: e.g. the port was taken (uvicorn said)


def main(argv: list[str]) -> int:
    from .options import parse_options
    opts = parse_options(argv)
    # Ignore SIGHUP from a closing terminal like a daemonised server would.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log(f"server_args=ServerArgs({', '.join(f'{k}={v!r}' for k, v in opts.server_args().items())})")
    return serve(opts)
