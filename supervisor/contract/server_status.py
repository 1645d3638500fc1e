"""The status snapshot's server and GPU records: a server's state and flags, what each
server is doing, and the GPUs' telemetry (re-exported by status.py, where clients find them).

Standard library only, like the rest of the contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from supervisor.contract.codec import Record

# A server flag's value as SGLang takes it on the command line (true = a bare switch; a list
# is repeated values: --cuda-graph-bs 1 2 4 8).
FlagScalar = str | int | float | bool
FlagValue = FlagScalar | tuple[FlagScalar, ...]


def flag_value(value: object) -> FlagValue:
    """A flag's value from the config (TOML gives lists; anything else odd becomes text)."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(v if isinstance(v, (bool, int, float, str)) else str(v) for v in value)
    return str(value)


class ServerState(StrEnum):
    """A server's life cycle (the daemon's own enum: supervisor.servers uses this one)."""
    STARTING = "STARTING"   # launched, waiting for /health_generate to answer 200
    READY = "READY"         # serving: the dispatcher keeps its slots full
    DRAINING = "DRAINING"   # no new requests; waiting for in-flight ones (restart/retune)
    STOPPING = "STOPPING"   # signalling the process group
    STOPPED = "STOPPED"     # no process (between a requested stop and the next start, or at exit)
    BACKOFF = "BACKOFF"     # failed; waiting before the next start
    FAILED = "FAILED"       # failed too often; waits for an operator's reset/restart
    # An attached server (servers.attach, not launched by the daemon) that went away:
    # unreachable, unhealthy or hung. Probed until it answers again; never restarted.
    GONE = "GONE"

    @classmethod
    def _missing_(cls, value: object) -> ServerState | None:
        """A state a newer daemon added (as GONE was): kept as its text, equal to no known
        state, so an older client still reads the snapshot (the versioning rule above)."""
        if not isinstance(value, str) or not value.isupper() or not value.isidentifier():
            return None
        member = str.__new__(cls, value)
        member._name_ = value
        member._value_ = value
        return member


# -- servers and GPUs -------------------------------------------------------------------------

@dataclass(frozen=True)
class Flag(Record):
    name: str                    # without the leading dashes: "mem-fraction-static"
    value: FlagValue


@dataclass(frozen=True)
class ServerStatus(Record):
    name: str
    gpus: tuple[int, ...]
    port: int
    state: ServerState
    state_reason: str            # why it is in its state ("oom: ...; restarting in 20 s")
    state_since: float
    pid: int | None
    # Seconds since it last became READY; None unless serving (READY, or DRAINING: it still
    # answers the requests it holds).
    uptime_s: float | None
    in_flight: int
    max_running: int             # the dispatcher's slots for it
    req_per_s: float             # windowed
    tok_per_s: float
    restarts: int
    failures_in_window: int      # counted toward FAILED
    last_exit_reason: str | None  # "oom: CUDA out of memory", "crash: exit 1", "hang: ..."
    flags: tuple[Flag, ...]      # the SGLang flags it runs (or will start) with
    argv: tuple[str, ...]
    tokens_per_joule: float | None = None
    # SGLang's own /metrics, read while READY when it runs with --enable-metrics
    # (sglang_metrics False: not read; a figure None: SGLang gave none, or the read failed).
    sglang_metrics: bool = False
    sglang_running: int | None = None        # requests it is running (all dp ranks)
    sglang_queued: int | None = None         # requests waiting in its queue
    token_usage: float | None = None         # KV cache used, 0..1 (the fullest rank)
    retractions: int | None = None           # requests it retracted since it started
    retractions_per_s: float | None = None   # over the last poll interval
    gen_throughput: float | None = None      # SGLang's live generation tokens/s
    sglang_error: str | None = None          # why the last read gave nothing
    # It queues or retracts what we send: our in-flight limit is more than it can run.
    overcommitted: bool = False
    overcommit_reason: str | None = None
    # The saturation guard (dispatch.saturation_guard): the in-flight limit in force now,
    # lowered below max_running while SGLang queues, retracts or its throughput collapses,
    # and why; None while the server is not serving.
    inflight_limit: int | None = None
    inflight_limit_reason: str | None = None
    # Streamed requests silent while the server streams for others: waiting in SGLang's
    # queue (KV budget) or retracted, not stalled; aborted only past dispatch.wait_s.
    waiting: int = 0
    # Lives in a row that failed before completing an answer (servers.max_unserved_failures
    # of them: FAILED).
    unserved_in_row: int = 0
    # Where the server is not the daemon's own (servers.attach): its URL. The daemon
    # supervises and feeds it but never starts, restarts or stops it.
    attached_url: str | None = None
    # The age of the sglang_* figures above at the snapshot's time (None: no good scrape
    # this life), and how often they are scraped: a slow or stuck scrape leaves the last
    # sample in place, so a client shows figures older than about two intervals as stale.
    sglang_age_s: float | None = None
    sglang_interval_s: float | None = None


@dataclass(frozen=True)
class GpuStatus(Record):
    index: int
    name: str | None
    server: str | None           # the server running on it
    power_w: float | None
    power_limit_w: float | None
    utilization_pct: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_c: float | None
    errors: tuple[str, ...] = ()  # "metric: reason" for each figure the driver did not give
    energy_j: float | None = None  # the driver's total-energy counter, where it has one


@dataclass(frozen=True)
class Gpus(Record):
    available: bool
    reason: str | None           # why there is no telemetry ("NVML Shared Library Not Found")
    sampled_at: float | None
    driver_version: str | None = None
    gpus: tuple[GpuStatus, ...] = ()


@dataclass(frozen=True)
class Energy(Record):
    """The job's energy use, where the GPUs report it."""
    joules_per_token: float | None = None   # over the metrics window
    kwh_so_far: float | None = None
    kwh_projected: float | None = None      # for the whole job
    source: str = ""                        # "counter", "power x time", or why unavailable
