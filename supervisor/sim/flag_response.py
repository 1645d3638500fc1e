"""How the simulated server answers its flags: decode speed against the running batch, the
Mamba-style cap on running requests, and a GPU memory budget with its two ways to OOM.

A tuner that searches flags on simulated servers needs a landscape with a known top and a
known edge, both set by `--sim-*` flags, so a test can compute where they are (the formulas
are in README.md, "Flag response"):

- speed: `--sim-batch-knee K` (each of n streams at 1 / (1 + (n-1)/K): the total saturates)
  or `--sim-batch-peak P` (each of n streams at (P² + 1) / (P² + n²): the total n (P² + 1) /
  (P² + n²) peaks at exactly n = P, as a real batch does once attention over n long contexts
  costs more than the extra rows bring);
- Mamba cap (`sglang/srt/mem_cache/kv_cache_configurator.py` resolve_max_num_reqs, :3120):
  a hybrid model runs at most max_mamba_cache_size // (state slots a request takes);
  `--sim-mamba-slots S` makes the model hybrid with an S-slot cache unless
  `--max-mamba-cache-size` says otherwise, at `--sim-mamba-slots-per-req` (5: the seed job's
  80 slots held 16 requests) slots a request;
- memory (`--sim-memory-gb M`): SGLang keeps mem_fraction_static x M for weights and the KV
  pool, the rest for activations and CUDA graphs. KV = f M - W GB holds
  `--sim-kv-tokens-per-gb` tokens a GB. No KV room fails at load with SGLang's "Not enough
  memory" error; f above `--sim-oom-fraction` fails at load with CUDA out of memory (the
  graphs no longer fit); a running batch whose worst-case tokens (prompt + max tokens of every
  running request, plus one prefill chunk) exceed the activation headroom's
  ((1 - f) M x `--sim-activation-tokens-per-gb`, or `--sim-oom-batch-tokens`) OOMs on the
  first such batch, mid-serving.
"""

from __future__ import annotations

from dataclasses import dataclass

# kv_cache_configurator.py:227 MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO: the ratio a server
# given only --max-mamba-cache-size is capped by (as the simulator always did).
SGLANG_BASE_MAMBA_RATIO = 3
DEFAULT_SLOTS_PER_REQ = 5
# SGLang sizes the chunk from the GPU's memory when the flag is unset: 8192 on 80 GB+ cards
# (server_args.py _handle_gpu_memory_settings).
DEFAULT_CHUNKED_PREFILL = 8192


def stream_factor(n: int, knee: int, peak: int) -> float:
    """The share of --sim-tokens-per-s each of n decoding streams gets."""
    if n <= 1:
        return 1.0
    if peak:
        return (peak * peak + 1) / (peak * peak + n * n)
    if knee:
        return 1.0 / (1 + (n - 1) / knee)
    return 1.0


def aggregate_factor(n: int, knee: int, peak: int) -> float:
    """The batch's total speed in units of one lone stream's."""
    return n * stream_factor(n, knee, peak)


@dataclass(frozen=True)
class MambaCap:
    """The hybrid model's state cache: None slots means a plain transformer (no cap)."""
    cache_size: int | None
    slots_per_req: int

    def cap(self) -> int | None:
        return None if self.cache_size is None else self.cache_size // self.slots_per_req

    def warning(self, capped_to: int) -> str:
        """SGLang 0.5.23's words when the cap binds (kv_cache_configurator.py:3131)."""
        return (f"max_running_requests is capped to {capped_to} by the mamba state cache "
                f"(max_mamba_cache_size={self.cache_size}, {self.slots_per_req} state slots per "
                "request). To raise it: increase --mamba-full-memory-ratio or "
                "--max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype "
                "bfloat16.")


def mamba_cap(max_mamba_cache_size: int | None, sim_slots: int | None,
              slots_per_req: int | None, disable_radix_cache: bool) -> MambaCap:
    """A radix cache off needs one slot a request (_calculate_mamba_ratio)."""
    size = max_mamba_cache_size if max_mamba_cache_size is not None else sim_slots
    if disable_radix_cache:
        ratio = 1
    elif slots_per_req is not None:
        ratio = slots_per_req
    else:
        ratio = DEFAULT_SLOTS_PER_REQ if sim_slots is not None else SGLANG_BASE_MAMBA_RATIO
    return MambaCap(size, ratio)


@dataclass(frozen=True)
class MemoryModel:
    """One GPU's memory as the simulated server spends it (all sizes in GB)."""
    total_gb: float
    weights_gb: float
    kv_tokens_per_gb: float
    activation_tokens_per_gb: float
    oom_fraction: float | None

    def kv_gb(self, mem_fraction_static: float) -> float:
        return mem_fraction_static * self.total_gb - self.weights_gb

    def pool_tokens(self, mem_fraction_static: float) -> int:
        return max(0, round(self.kv_gb(mem_fraction_static) * self.kv_tokens_per_gb))

    def headroom_gb(self, mem_fraction_static: float) -> float:
        return (1.0 - mem_fraction_static) * self.total_gb

    def batch_tokens_limit(self, mem_fraction_static: float) -> int:
        return round(self.headroom_gb(mem_fraction_static) * self.activation_tokens_per_gb)

    def load_failure(self, mem_fraction_static: float) -> str | None:
        """Why loading fails at this fraction: "no_kv" (weights fill the static share, SGLang's
        "Not enough memory" error), "graphs" (past the cliff: CUDA out of memory while
        capturing the graphs), or None."""
        if self.pool_tokens(mem_fraction_static) < 16:
            return "no_kv"
        if self.oom_fraction is not None and mem_fraction_static > self.oom_fraction:
            return "graphs"
        return None


def batch_demand(running: list[tuple[int, int]], chunked_prefill_size: int) -> int:
    """A batch's worst case in tokens: every running request's prompt and whole budget, plus
    the prefill chunk that is computed beside them."""
    return sum(prompt + budget for prompt, budget in running) + max(0, chunked_prefill_size)
