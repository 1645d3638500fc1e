"""The simulator's command line: SGLang 0.5.23's launch flags plus its own `--sim-*` flags.

The daemon launches the simulator exactly as it launches `python -m sglang.launch_server`, with
whatever pass-through flags the operator configured. Those are parsed by SGLang's own parser
rebuilt from its flag table (sglang_parser.py): a flag 0.5.23 does not know, or an ambiguous
abbreviation of one, exits 2 with argparse's message, exactly as the real server would, so
a config that cannot start SGLang cannot start the simulator either.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .flag_response import DEFAULT_CHUNKED_PREFILL, MambaCap, MemoryModel, batch_demand, mamba_cap
from .sglang_parser import sglang_parser

FAULTS = ("none", "crash", "oom", "hang", "stall", "retract", "collapse")


@dataclass(frozen=True)
class SimOptions:
    # SGLang's own flags (the subset whose values change what the simulator does or reports).
    model_path: str
    host: str
    port: int
    max_running_requests: int | None
    mem_fraction_static: float
    max_mamba_cache_size: int | None
    context_length: int
    reasoning_parser: str | None
    tp_size: int
    dp_size: int
    enable_metrics: bool
    served_model_name: str | None
    allow_auto_truncate: bool
    # The simulator's behaviour.
    startup_s: float
    tokens_per_s: float
    time_scale: float
    instant: bool
    seed: int
    fault: str
    fault_after_s: float | None
    fault_after_requests: int | None
    empty_rate: float
    children: int
    loop_share: float = 0.0
    stall_share: float = 0.0
    error_share: float = 0.0
    collapse_factor: float = 8.0
    disable_radix_cache: bool = False
    skip_server_warmup: bool = False
    launch_command: str = ""
    stream_step: int = 16            # tokens per streamed delta; 0: one delta per part
    # Deltas due on the simulated GPU's clock (decode_meter.py StreamSchedule), not after
    # the last one's send: off by default until the suite's timing-bound tests are retuned.
    stream_on_schedule: bool = False
    max_total_tokens: int | None = None   # SGLang's --max-total-tokens: the KV pool, in tokens
    attn_dp_size: int = 1
    batch_knee: int = 0              # see decode_meter.py; 0: a stream's speed ignores the batch
    # The flag-response model (flag_response.py).
    batch_peak: int = 0              # 0: off; P: the batch's total speed peaks at P streams
    mamba: MambaCap = MambaCap(None, 3)
    memory: MemoryModel | None = None
    oom_batch_tokens: int | None = None   # explicit; else derived from `memory`, else none
    chunked_prefill_size: int = DEFAULT_CHUNKED_PREFILL

    @property
    def max_total_num_tokens(self) -> int:
        """The simulated KV pool: --max-total-tokens when given (SGLang caps its pool there,
        `sglang/srt/model_executor/model_runner.py`), else it grows with the memory fraction
        the operator gave it (0.88 -> 880,000 tokens: roomy enough that only a test that
        asks for pressure sees any)."""
        if self.memory is not None:
            pool = self.memory.pool_tokens(self.mem_fraction_static)
            return pool if self.max_total_tokens is None else min(pool, self.max_total_tokens)
        if self.max_total_tokens is not None:
            return self.max_total_tokens
        return int(self.mem_fraction_static * 1_000_000)

    @property
    def effective_max_running_requests(self) -> int:
        """The scheduler's max_running_requests as SGLang resolves it
        (`sglang/srt/mem_cache/kv_cache_configurator.py` resolve_max_num_reqs): the flag capped
        at half the KV pool, else pool / context * 512 clamped to [2048, 4096]; then a hybrid
        (mamba) model caps it at its cache size // state slots a request (flag_response.py)."""
        n = self.requested_running_requests
        cap = self.mamba.cap()
        if cap is not None:
            n = min(n, cap)
        return max(1, n)

    @property
    def requested_running_requests(self) -> int:
        """Before the Mamba cap: the flag, or the pool's estimate, within half the pool."""
        capacity = self.max_total_num_tokens
        if self.max_running_requests is not None:
            return min(max(1, self.max_running_requests), capacity // 2)
        estimated = max(min(int(capacity / self.context_length * 512), 4096), 2048)
        return min(estimated, capacity // 2)

    @property
    def mamba_capped(self) -> bool:
        cap = self.mamba.cap()
        return cap is not None and cap < self.requested_running_requests

    def batch_tokens_limit(self) -> int | None:
        """The worst-case batch tokens past which a full batch OOMs (None: never)."""
        if self.oom_batch_tokens is not None:
            return self.oom_batch_tokens
        if self.memory is not None:
            return self.memory.batch_tokens_limit(self.mem_fraction_static)
        return None

    def batch_ooms(self, running: list[tuple[int, int]]) -> bool:
        """Whether this running batch ((prompt, max new tokens) each) is past the limit."""
        limit = self.batch_tokens_limit()
        return (limit is not None and bool(running)
                and batch_demand(running, self.chunked_prefill_size) > limit)

    @property
    def max_req_input_len(self) -> int:
        """The longest prompt the scheduler admits (`sglang/srt/managers/tp_worker.py`
        get_worker_info): min(context - 1, KV pool - 1) - 5."""
        return min(self.context_length - 1, self.max_total_num_tokens - 1) - 5

    @property
    def model_name(self) -> str:
        """What /v1/models and responses call the model (SGLang: served name, else the path)."""
        return self.served_model_name or self.model_path

    def server_args(self) -> dict[str, Any]:
        """The settings echoed by /server_info, named as SGLang's ServerArgs names them."""
        return {
            "model_path": self.model_path, "tokenizer_path": self.model_path,
            "host": self.host, "port": self.port,
            "max_running_requests": self.max_running_requests,
            "mem_fraction_static": self.mem_fraction_static,
            # Resolved: SGLang writes the size it settled on back into its args
            # (kv_cache_configurator.py _handle_max_mamba_cache).
            "max_mamba_cache_size": self.mamba.cache_size,
            "chunked_prefill_size": self.chunked_prefill_size,
            "context_length": self.context_length,
            "reasoning_parser": self.reasoning_parser,
            "tp_size": self.tp_size, "dp_size": self.dp_size,
            # srt/arg_groups/fields/parallel.py:73,81; resolved to 1 without DP attention.
            "attn_dp_size": self.attn_dp_size,
            "max_total_tokens": self.max_total_tokens,
            "enable_metrics": self.enable_metrics,
            "allow_auto_truncate": self.allow_auto_truncate,
            "served_model_name": self.model_name,
        }


def _sim_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m supervisor.sim", allow_abbrev=False,
        description="A simulated SGLang 0.5.23 server (no GPU): SGLang's HTTP API, "
                    "slot-limited batching, slow start and SGLang's failure modes. Every "
                    "other flag is parsed as `sglang serve` parses it (see sglang_flags.py).")
    s = p.add_argument_group("simulator flags")
    s.add_argument("--sim-startup-s", type=float, default=0.0,
                   help="seconds spent 'loading the model' (the port is closed meanwhile)")
    s.add_argument("--sim-tokens-per-s", type=float, default=50.0,
                   help="decode speed of one request")
    s.add_argument("--sim-time-scale", type=float, default=1.0,
                   help="divide every duration by this (run a day's shape in minutes)")
    s.add_argument("--sim-instant", action="store_true", help="answer at once (benchmarks)")
    s.add_argument("--sim-seed", type=int, default=0)
    s.add_argument("--sim-fault", choices=FAULTS, default="none")
    s.add_argument("--sim-fault-after-s", type=float, default=None,
                   help="trigger the fault this long after ready (scaled)")
    s.add_argument("--sim-fault-after-requests", type=int, default=None,
                   help="trigger the fault after this many completed requests")
    s.add_argument("--sim-empty-rate", type=float, default=0.0,
                   help="share of prompts answered with empty content and no reasoning")
    s.add_argument("--sim-stall-share", type=float, default=0.0,
                   help="share of prompts whose first request gets stuck halfway (no more "
                        "tokens until aborted; see faults.py)")
    s.add_argument("--sim-error-share", type=float, default=0.0,
                   help="share of prompts whose first request is aborted halfway with "
                        "SGLang's out-of-memory error (mid-stream error chunk; see faults.py)")
    s.add_argument("--sim-collapse-factor", type=float, default=8.0,
                   help="with --sim-fault collapse: decode runs this many times slower")
    s.add_argument("--sim-loop-share", type=float, default=0.0,
                   help="share of the long answers (past 4,096 tokens) that loop forever "
                        "instead (see looping_text.py)")
    s.add_argument("--sim-stream-step", type=int, default=None,
                   help="tokens per streamed delta (default: SGLang's --stream-interval "
                        "when given, else 16); 0: the whole trace in one delta and the "
                        "whole answer in another, as SGLang coalesces the deltas a client "
                        "has not read yet (tokenizer_manager.py _coalesce_streaming_chunks)")
    s.add_argument("--sim-stream-on-schedule", action="store_true",
                   help="time each streamed delta from when the last one was due, as "
                        "SGLang's scheduler decodes on while its sends go out (the default "
                        "times it from the last one's send, so a busy CPU slows every "
                        "stream: decode_meter.py StreamSchedule)")
    s.add_argument("--sim-batch-knee", type=int, default=None,
                   help="a batch of n decodes each stream at 1/(1+(n-1)/K) of "
                        "--sim-tokens-per-s, the total saturating at K streams' worth "
                        "(default: 32 with --max-total-tokens, else 0: no slowdown)")
    _flag_response_flags(p)
    s.add_argument("--sim-children", type=int, default=0,
                   help="sleeping child processes in our process group (like SGLang's "
                        "scheduler and detokenizer)")
    return p


def _flag_response_flags(p: argparse.ArgumentParser) -> None:
    f = p.add_argument_group("flag-response model (flag_response.py; formulas in README.md)")
    f.add_argument("--sim-batch-peak", type=int, default=0,
                   help="a batch of n decodes each stream at (P^2+1)/(P^2+n^2) of "
                        "--sim-tokens-per-s: the total peaks at exactly P streams "
                        "(0: off; not with --sim-batch-knee)")
    f.add_argument("--sim-mamba-slots", type=int, default=None,
                   help="a hybrid model with this many Mamba state slots (unless "
                        "--max-mamba-cache-size is given): running requests are capped at "
                        "slots // --sim-mamba-slots-per-req, with SGLang's warning")
    f.add_argument("--sim-mamba-slots-per-req", type=int, default=None,
                   help="state slots a request takes (default 5 with --sim-mamba-slots, "
                        "else SGLang's base ratio 3; 1 with --disable-radix-cache)")
    f.add_argument("--sim-memory-gb", type=float, default=None,
                   help="GPU memory: the KV pool becomes (mem-fraction-static x this - "
                        "weights) x --sim-kv-tokens-per-gb tokens (unset: no memory model)")
    f.add_argument("--sim-weights-gb", type=float, default=None,
                   help="model weights, GB (default: half of --sim-memory-gb)")
    f.add_argument("--sim-kv-tokens-per-gb", type=float, default=10_000.0,
                   help="KV tokens one GB holds")
    f.add_argument("--sim-activation-tokens-per-gb", type=float, default=50_000.0,
                   help="worst-case batch tokens one GB of headroom (1 - mem-fraction-static "
                        "of the memory) carries before a full batch OOMs")
    f.add_argument("--sim-oom-fraction", type=float, default=None,
                   help="a --mem-fraction-static above this OOMs at load (default 0.95 with "
                        "--sim-memory-gb)")
    f.add_argument("--sim-oom-batch-tokens", type=int, default=None,
                   help="a running batch whose prompt + max tokens (plus one prefill chunk) "
                        "exceed this OOMs mid-serving (default: from --sim-memory-gb)")


def _memory_model(sim: argparse.Namespace) -> MemoryModel | None:
    if sim.sim_memory_gb is None:
        for flag in ("weights_gb", "oom_fraction"):
            if getattr(sim, f"sim_{flag}") is not None:
                raise SystemExit(f"--sim-{flag.replace('_', '-')} needs --sim-memory-gb")
        return None
    total = sim.sim_memory_gb
    weights = total / 2 if sim.sim_weights_gb is None else sim.sim_weights_gb
    if total <= 0 or not 0 <= weights < total:
        raise SystemExit("--sim-memory-gb must be > 0 and --sim-weights-gb within [0, memory)")
    if sim.sim_kv_tokens_per_gb <= 0 or sim.sim_activation_tokens_per_gb <= 0:
        raise SystemExit("--sim-kv-tokens-per-gb and --sim-activation-tokens-per-gb must be > 0")
    oom = 0.95 if sim.sim_oom_fraction is None else sim.sim_oom_fraction
    if not 0 < oom <= 1:
        raise SystemExit(f"--sim-oom-fraction must be within (0, 1], got {oom}")
    return MemoryModel(total, weights, sim.sim_kv_tokens_per_gb,
                       sim.sim_activation_tokens_per_gb, oom)


def _check_flag_response(sim: argparse.Namespace, ns: argparse.Namespace, knee: int) -> None:
    if sim.sim_batch_peak < 0:
        raise SystemExit("--sim-batch-peak must be >= 0")
    if sim.sim_batch_peak and knee:
        raise SystemExit("--sim-batch-peak and --sim-batch-knee are two speed models: give one")
    for name in ("sim_mamba_slots", "sim_mamba_slots_per_req", "sim_oom_batch_tokens"):
        value = getattr(sim, name)
        if value is not None and value < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if ns.max_mamba_cache_size is not None and ns.max_mamba_cache_size < 1:
        raise SystemExit("--max-mamba-cache-size must be >= 1")
    if ns.mem_fraction_static is not None and not 0 < ns.mem_fraction_static < 1:
        raise SystemExit(f"--mem-fraction-static must be within (0, 1), got "
                         f"{ns.mem_fraction_static}")


def parse_options(argv: Sequence[str]) -> SimOptions:
    """The --sim-* flags first; everything else goes to SGLang's own parser, which exits 2
    with argparse's message on an unknown, ambiguous or malformed flag, as SGLang does."""
    argv = list(argv)
    sim, rest = _sim_parser().parse_known_args(argv)
    ns = sglang_parser().parse_args(rest)
    if sim.sim_time_scale <= 0 or sim.sim_tokens_per_s <= 0:
        raise SystemExit("--sim-time-scale and --sim-tokens-per-s must be > 0")
    if not 0.0 <= sim.sim_empty_rate <= 1.0:
        raise SystemExit("--sim-empty-rate must be within [0, 1]")
    if not 0.0 <= sim.sim_loop_share <= 1.0:
        raise SystemExit("--sim-loop-share must be within [0, 1]")
    if not 0.0 <= sim.sim_stall_share <= 1.0:
        raise SystemExit("--sim-stall-share must be within [0, 1]")
    if not 0.0 <= sim.sim_error_share <= 1.0:
        raise SystemExit("--sim-error-share must be within [0, 1]")
    if not sim.sim_collapse_factor >= 1.0:
        raise SystemExit("--sim-collapse-factor must be >= 1")
    if ns.max_running_requests is not None and ns.max_running_requests < 1:
        raise SystemExit("--max-running-requests must be >= 1")
    stream_step = _stream_step(sim.sim_stream_step, rest, ns.stream_interval)
    max_total_tokens = _max_total_tokens(ns.max_total_tokens)
    knee = sim.sim_batch_knee
    if knee is None:
        knee = 32 if max_total_tokens is not None else 0
    if knee < 0:
        raise SystemExit("--sim-batch-knee must be >= 0")
    if sim.sim_batch_peak and sim.sim_batch_knee is None:
        knee = 0                     # the peak replaces the default knee
    _check_flag_response(sim, ns, knee)
    return SimOptions(
        model_path=ns.model_path, host=ns.host or "127.0.0.1",
        port=30000 if ns.port is None else ns.port,
        max_running_requests=ns.max_running_requests,
        # SGLang picks these from the GPU and the model's config when unset.
        mem_fraction_static=0.88 if ns.mem_fraction_static is None else ns.mem_fraction_static,
        max_mamba_cache_size=ns.max_mamba_cache_size,
        context_length=32768 if ns.context_length is None else ns.context_length,
        reasoning_parser=ns.reasoning_parser, tp_size=ns.tp_size or 1, dp_size=ns.dp_size or 1,
        enable_metrics=ns.enable_metrics, served_model_name=ns.served_model_name,
        allow_auto_truncate=ns.allow_auto_truncate,
        startup_s=sim.sim_startup_s, tokens_per_s=sim.sim_tokens_per_s,
        time_scale=sim.sim_time_scale, instant=sim.sim_instant, seed=sim.sim_seed,
        fault=sim.sim_fault, fault_after_s=sim.sim_fault_after_s,
        fault_after_requests=sim.sim_fault_after_requests, empty_rate=sim.sim_empty_rate,
        children=sim.sim_children, loop_share=sim.sim_loop_share,
        stall_share=sim.sim_stall_share, error_share=sim.sim_error_share,
        collapse_factor=sim.sim_collapse_factor,
        disable_radix_cache=ns.disable_radix_cache, skip_server_warmup=ns.skip_server_warmup,
        launch_command=" ".join(["python3", "-m", "sglang.launch_server", *rest]),
        stream_step=stream_step, stream_on_schedule=sim.sim_stream_on_schedule,
        max_total_tokens=max_total_tokens, attn_dp_size=_attn_dp_size(ns), batch_knee=knee,
        batch_peak=sim.sim_batch_peak,
        mamba=mamba_cap(ns.max_mamba_cache_size, sim.sim_mamba_slots,
                        sim.sim_mamba_slots_per_req, ns.disable_radix_cache),
        memory=_memory_model(sim), oom_batch_tokens=sim.sim_oom_batch_tokens,
        chunked_prefill_size=(DEFAULT_CHUNKED_PREFILL if ns.chunked_prefill_size is None
                              else ns.chunked_prefill_size))


def _max_total_tokens(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        tokens = int(value)
    except ValueError:
        raise SystemExit(f"--max-total-tokens must be an integer, got {value!r}") from None
    if tokens < 16:
        raise SystemExit(f"--max-total-tokens must be at least 16, got {tokens}")
    return tokens


def _attn_dp_size(ns: argparse.Namespace) -> int:
    """Attention DP ranks as ServerArgs resolves them: dp_size with DP attention, else 1
    (srt/arg_groups/fields/parallel.py:73,81)."""
    explicit = getattr(ns, "attn_dp_size", None)
    if explicit:
        return explicit
    return (ns.dp_size or 1) if getattr(ns, "enable_dp_attention", False) else 1


def _stream_step(sim_step: int | None, rest: list[str], stream_interval: int) -> int:
    """Tokens per streamed delta: --sim-stream-step when given; else SGLang's own
    --stream-interval when the launch sets it (the daemon does: servers/launch_command.py);
    else 16, lighter than SGLang's default of 1 for servers a test starts by hand."""
    if sim_step is not None:
        if sim_step < 0:
            raise SystemExit("--sim-stream-step must be >= 0")
        return sim_step
    if any(a == "--stream-interval" or a.startswith("--stream-interval=") for a in rest):
        if stream_interval < 1:
            raise SystemExit("--stream-interval must be >= 1")
        return stream_interval
    return 16
