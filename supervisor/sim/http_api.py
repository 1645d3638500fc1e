"""The simulator's HTTP surface: SGLang 0.5.23's endpoints plus /sim/* for tests and demos.

Once the HTTP server is up, SGLang answers /health and /health_generate with 503 until its
warmup request has run, then 200 with an empty body after at least a second; the daemon's
READY transition hangs on exactly that.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from .batch_slots import BatchSlots
from .chat_completion import ERRORED, SCHEDULER_OOM_ABORT, BadRequest, ChatHandler, error_body
from .chat_stream import stream_completion
from .decode_meter import DecodeMeter
from .faults import FaultState
from .native_generate import abort_request, generate
from .options import FAULTS, SimOptions
from .prom_metrics import SchedulerSample, SimMetrics, metrics_asgi_app
from .retraction import Retraction
from .sim_log import log_err
from .token_routes import detokenize_route, tokenize

SGLANG_VERSION = "0.5.23 (simulated)"
HEALTH_CHECK_MIN_S = 1.0
# `sglang/srt/entrypoints/http_server.py`:218 HEALTH_CHECK_TIMEOUT: a probe that sees no
# output from the scheduler for this long answers 503.
HEALTH_CHECK_TIMEOUT_S = 20.0


@dataclass
class SimRuntime:
    """Everything one simulated server knows; routes and the lifecycle share it."""
    opts: SimOptions
    slots: BatchSlots
    faults: FaultState
    metrics: SimMetrics | None = None
    ready: bool = False
    started_at: float = field(default_factory=time.time)
    startup_time: float = 0.0            # seconds from launch to ready, as SGLang reports it
    completed: int = 0
    meter: DecodeMeter | None = None     # made from the options when not given
    aborts: int = 0                      # aborts sent to the scheduler
    retraction: Retraction = field(init=False)
    chat: ChatHandler = field(init=False)

    def __post_init__(self) -> None:
        self.retraction = Retraction(self.slots, self.metrics)
        o = self.opts
        if self.meter is None:
            self.meter = DecodeMeter(o.tokens_per_s, o.time_scale, instant=o.instant,
                                     batch_knee=o.batch_knee, batch_peak=o.batch_peak)
        self.faults.on_speed = self._on_speed
        self.chat = ChatHandler(self.opts, self.slots, self.faults, self._on_finished,
                                self.meter)
        self.chat.on_abort = self._on_abort

    def _on_speed(self, speed: float) -> None:
        assert self.meter is not None
        self.meter.set_speed(speed)
        # A stuck scheduler admits nothing either; freed, it admits what fits at once.
        self.slots.pool.frozen = speed == 0
        self.slots.pool.admit()

    def _on_abort(self) -> None:
        """`sglang/srt/managers/tokenizer_manager.py` abort_request: each abort it sends the
        scheduler counts once in sglang:num_aborted_requests_total
        (`sglang/srt/observability/metrics_collector.py`:1959), which only exists after it."""
        self.aborts += 1
        if self.metrics is not None:
            self.metrics.aborted()

    def _on_finished(self, prompt_tokens: int, completion_tokens: int, streaming: bool) -> None:
        self.completed += 1
        if self.metrics is not None:
            self.metrics.finished_request(prompt_tokens, completion_tokens, streaming)
        after = self.opts.fault_after_requests
        if after is not None and self.completed == after and self.opts.fault != "none":
            self.trigger_soon(self.opts.fault)

    def last_output_at(self) -> float:
        """Wall-clock time of the scheduler's last output (for the health check's line)."""
        assert self.meter is not None
        return time.time() - (time.monotonic() - self.meter.last_token_at)

    def trigger_soon(self, fault: str) -> None:
        """Apply a fault once the current response is on its way (crash, oom and hang never
        return, so doing it inline would lose the answer that triggered it)."""
        asyncio.get_running_loop().call_later(0.05, self.faults.apply, fault)


def _model_info(rt: SimRuntime) -> dict[str, Any]:
    return {"model_path": rt.opts.model_path, "tokenizer_path": rt.opts.model_path,
            "is_generation": True, "preferred_sampling_params": None,
            "weight_version": "default", "has_image_understanding": False,
            "has_audio_understanding": False, "model_type": "qwen3_next",
            "architectures": ["Qwen3NextForCausalLM"]}


def _server_info(rt: SimRuntime) -> dict[str, Any]:
    """SGLang's /server_info (`sglang/srt/entrypoints/http_server.py` server_info): the
    resolved server args, the scheduler's handshake info, and one internal state per DP rank
    (`sglang/srt/managers/scheduler_components/internal_state.py`), which carries the
    scheduler's real slot count as effective_max_running_requests_per_dp."""
    o = rt.opts
    args = o.server_args()
    internal = dict(args)
    # SGLang reports the flag as given (null when unset); the scheduler's own figure is
    # per DP rank in internal_states, and may be far above what the KV pool admits.
    internal.update({
        "world_size": o.tp_size * o.dp_size,
        "startup_time": rt.startup_time,
        "effective_max_running_requests_per_dp": o.effective_max_running_requests,
        "last_gen_throughput": rt.meter.read(),
        "memory_usage": {"weight": _gb(o.memory.weights_gb if o.memory else 0.0),
                         "kvcache": _gb(o.memory.kv_gb(o.mem_fraction_static)
                                        if o.memory else 0.0),
                         "startup_available": _gb(o.memory.total_gb if o.memory else 0.0),
                         "token_capacity": o.max_total_num_tokens, "token_capacity_swa": None,
                         "graph": {}},
    })
    info = dict(args)
    info.update({
        "launch_command": o.launch_command,
        "status": "ready",
        "max_total_num_tokens": o.max_total_num_tokens,
        "max_req_input_len": o.max_req_input_len,
        "startup_time": rt.startup_time,
        "internal_states": [internal for _ in range(max(1, o.dp_size))],
        "version": SGLANG_VERSION,
        "frontend": "python",
        # Not in real SGLang: the simulator's own settings and counters, for tests.
        "sim": _sim_state(rt),
    })
    return info


def _gb(value: float) -> float:
    return round(value, 2)


def _sim_state(rt: SimRuntime) -> dict[str, Any]:
    s = rt.slots.stats
    o = rt.opts
    return {"ready": rt.ready, "fault": rt.faults.fault, "empty_rate": rt.faults.empty_rate,
            "stall_share": rt.faults.stall_share, "error_share": rt.faults.error_share,
            "collapse_factor": rt.faults.collapse_factor, "decode_speed": rt.meter.speed,
            "aborted_rids": list(rt.chat.inflight.aborted),
            "running": s.running, "queued": s.queued, "peak_running": s.peak_running,
            "peak_queued": s.peak_queued, "requests_total": s.requests_total,
            "generation_tokens_total": s.generation_tokens_total,
            # Counted as decoded (the meter's integral), not as answers end.
            "decoded_tokens": round(rt.meter.generated(), 1),
            "tokens_per_s": o.tokens_per_s, "time_scale": o.time_scale, "instant": o.instant,
            "seed": o.seed, "startup_s": o.startup_s, "children": [c.pid for c in rt.faults.children],
            "kv_used_tokens": rt.slots.pool.used(), "kv_capacity": rt.slots.pool.capacity,
            "new_token_ratio": round(rt.slots.pool.new_token_ratio(), 4),
            "retracted_total": rt.retraction.total, "aborts": rt.aborts,
            "batch_knee": o.batch_knee, "batch_peak": o.batch_peak,
            "batch_tokens_limit": o.batch_tokens_limit()}


def scheduler_sample(rt: SimRuntime) -> SchedulerSample:
    s = rt.slots.stats
    pool = rt.opts.max_total_num_tokens
    used = min(pool, s.kv_tokens)
    return SchedulerSample(
        num_running_reqs=s.running, num_queue_reqs=s.queued,
        gen_throughput=rt.meter.read(), token_usage=round(used / pool, 2),
        num_used_tokens=used, max_total_num_tokens=pool,
        num_retracted_reqs=rt.retraction.last_retracted,
        decode_tokens_total=rt.meter.generated())


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def build_app(rt: SimRuntime, lifespan: Any = None) -> Starlette:
    async def health(_: Request) -> Response:
        # `sglang/srt/entrypoints/http_server.py` health_generate (/health too, as
        # SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION defaults on): 503 at once while the
        # status is Starting; otherwise it sends a one-token request and looks, once a
        # second, for any output from the scheduler since it began (its own or anyone's):
        # 200 at the first, so never sooner than a second; 503 after HEALTH_CHECK_TIMEOUT
        # (20 s) without any, with SGLang's error line. A stuck scheduler gives no output;
        # a busy one serving others does.
        if not rt.ready:
            return Response(status_code=503)
        scale = rt.opts.time_scale
        tic = time.time()
        for _ in range(int(HEALTH_CHECK_TIMEOUT_S / HEALTH_CHECK_MIN_S)):
            await asyncio.sleep(HEALTH_CHECK_MIN_S / scale)
            if not rt.faults.is_stalled:
                return Response(status_code=200)
        log_err("Health check failed. Server couldn't get a response from detokenizer for "
                f"last {HEALTH_CHECK_TIMEOUT_S:g} seconds. tic start time: "
                f"{time.strftime('%H:%M:%S', time.localtime(tic))}. last_heartbeat time: "
                f"{time.strftime('%H:%M:%S', time.localtime(rt.last_output_at()))}")
        return Response(status_code=503)

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": rt.opts.model_name, "object": "model", "created": int(rt.started_at),
            "owned_by": "sglang", "root": rt.opts.model_name, "parent": None,
            "max_model_len": rt.opts.context_length}]})

    async def model_info(_: Request) -> Response:
        return JSONResponse(_model_info(rt))

    async def server_info(_: Request) -> Response:
        # SGLang asks every scheduler for its internal state (get_internal_state): a stuck
        # scheduler never answers, so neither does this route, until it is unstuck.
        while rt.faults.is_stalled:
            await asyncio.sleep(0.05)
        return JSONResponse(_server_info(rt))

    async def chat(request: Request) -> Response:
        # Served during warmup too: only the health routes look at the startup status.
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            return JSONResponse(error_body(f"JSON decode error: {exc}", kind="Bad Request"),
                                status_code=400)
        try:
            req, done = rt.chat.prepare(body, request.headers)
        except BadRequest as exc:
            return JSONResponse(error_body(str(exc), kind=exc.kind), status_code=400)
        if not req.stream and done.refusal is not None:
            # The scheduler's refusal, unstreamed: a ValueError in the tokenizer manager
            # (tokenizer_manager.py _handle_abort_finish_reason), answered as a 400 of type
            # "BadRequestError" (seen on the real server).
            return JSONResponse(error_body(done.refusal), status_code=400)
        if not req.stream:
            done = await rt.chat.decode(done)
            if done.finish_reason == ERRORED:
                # Aborted with a status code, unstreamed: the tokenizer manager raises an
                # HTTPException, which serving_base.py handle_request answers with
                # create_error_response(e.detail, err_type=str(e.status_code), code)
                # (`sglang/srt/managers/tokenizer_manager.py` _handle_abort_finish_reason).
                return JSONResponse(error_body(SCHEDULER_OOM_ABORT, 500, kind="500"),
                                    status_code=500)
            return JSONResponse(done.response(req.wanted))
        # Kick-started before the 200 goes out, as SGLang does (serving_chat.py).
        events = stream_completion(rt.chat, req, done)
        first = await events.__anext__()

        async def body_events() -> AsyncIterator[str]:
            yield first
            async for event in events:
                yield event
        return StreamingResponse(body_events(), media_type="text/event-stream")

    async def sim_fault(request: Request) -> Response:
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError as exc:
            return JSONResponse(error_body(f"Invalid JSON body: {exc}"), status_code=400)
        if not isinstance(body, dict):
            return JSONResponse(error_body("body must be a JSON object"), status_code=400)
        fault = body.get("fault")
        if fault is not None and fault not in FAULTS:
            return JSONResponse(error_body(f"fault must be one of {', '.join(FAULTS)}"),
                                status_code=400)
        # Every value checked before any is applied: a refused body changes nothing.
        shares: dict[str, float] = {}
        for key in ("empty_rate", "stall_share", "error_share"):
            value = body.get(key)
            if value is not None:
                if not _number(value) or not 0 <= value <= 1:
                    return JSONResponse(error_body(f"{key} must be a number within [0, 1]"),
                                        status_code=400)
                shares[key] = float(value)
        factor = body.get("collapse_factor")
        if factor is not None and (not _number(factor) or not factor >= 1):
            return JSONResponse(error_body("collapse_factor must be a number >= 1"),
                                status_code=400)
        for key, value in shares.items():
            setattr(rt.faults, key, value)
        if factor is not None:
            rt.faults.collapse_factor = float(factor)
        if fault is None and factor is not None and rt.faults.fault == "collapse":
            fault = "collapse"            # a new factor for the collapse under way
        if fault in ("none", "stall", "collapse"):
            rt.faults.apply(fault)
        elif fault is not None:
            rt.trigger_soon(fault)
        return JSONResponse({"fault": fault or rt.faults.fault,
                             "empty_rate": rt.faults.empty_rate,
                             "stall_share": rt.faults.stall_share,
                             "error_share": rt.faults.error_share,
                             "collapse_factor": rt.faults.collapse_factor})

    async def native_generate(request: Request) -> Response:
        return await generate(rt.chat, request)

    async def native_abort(request: Request) -> Response:
        return await abort_request(rt.chat, request)

    async def sim_state(_: Request) -> Response:
        return JSONResponse(_sim_state(rt))

    async def tokenize_route(request: Request) -> Response:
        return await tokenize(rt.opts, request)

    routes = [
        Route("/health", health, methods=["GET", "HEAD"]),
        Route("/health_generate", health, methods=["GET", "HEAD"]),
        Route("/v1/models", models),
        Route("/model_info", model_info), Route("/get_model_info", model_info),
        Route("/server_info", server_info), Route("/get_server_info", server_info),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/generate", native_generate, methods=["POST", "PUT"]),
        Route("/abort_request", native_abort, methods=["POST"]),
        # `sglang/srt/entrypoints/http_server.py` ~1906-1936: both paths, POST only.
        Route("/v1/tokenize", tokenize_route, methods=["POST"]),
        Route("/tokenize", tokenize_route, methods=["POST"]),
        Route("/v1/detokenize", detokenize_route, methods=["POST"]),
        Route("/detokenize", detokenize_route, methods=["POST"]),
        Route("/sim/fault", sim_fault, methods=["POST"]),
        Route("/sim/state", sim_state),
    ]
    if rt.metrics is not None:
        # Only with --enable-metrics, as SGLang (`sglang/srt/entrypoints/http_server.py`):
        # without it /metrics is a plain 404. Mounted to answer /metrics itself, not a
        # redirect to /metrics/ (`sglang/srt/utils/common.py` add_prometheus_middleware).
        metrics = rt.metrics
        mount = Mount("/metrics", metrics_asgi_app(
            lambda: metrics.log_stats(scheduler_sample(rt))))
        mount.path_regex = re.compile("^/metrics(?P<path>.*)$")
        routes.append(mount)
    return Starlette(routes=routes, lifespan=lifespan)
