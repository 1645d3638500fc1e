"""The status snapshot: every record `GET /v1/status` serves and `/v1/events` streams.

Standard library only, so `dflash-tui`, scripts and `dflash-supervisor status` can read it
without the daemon's dependencies. Every record is a frozen dataclass with typed fields (no
Any, no bare dicts); `Status.from_json(Status.to_json(s)) == s` for every snapshot.

Versioning: `SCHEMA_VERSION` changes only when a field is removed, renamed or changes meaning.
Adding a field is not a new version: new fields always have a default, readers ignore fields
they do not know, so an older client reads a newer daemon's snapshot and the reverse.

Units: times are unix seconds (float), durations seconds, sizes bytes, rates per second,
token counts output (completion) tokens. None means "unknown / not available", never 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from supervisor.contract.codec import ContractError, Record, dumps, from_plain
from supervisor.contract.continuation import Continuation
from supervisor.contract.server_status import (
    Energy,
    Flag,
    FlagScalar,
    FlagValue,
    Gpus,
    GpuStatus,
    ServerState,
    ServerStatus,
    flag_value,
)
from supervisor.contract.tuning import Tuning

# What moved to server_status.py stays importable from here (clients read `c.ServerState`).
__all__ = ["SCHEMA_VERSION", "Continuation", "ContractError", "Energy", "Flag", "FlagScalar",
           "FlagValue", "GpuStatus", "Gpus", "ServerState", "ServerStatus", "flag_value"]

SCHEMA_VERSION = 1

# -- the job ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class JobCounts(Record):
    """Prompts by state, from the state DB (exact, not windowed)."""
    total: int
    done: int
    pending: int
    in_flight: int
    failed: int             # gave up on (HTTP 400, attempts exhausted); can be requeued
    # Done prompts cut off (finish_reason length) under a lower limit than the live max
    # tokens: what "requeue truncated" would send back to pending now (Store.truncated_count).
    requeueable_truncated: int | None = None
    # Done prompts that ended at their limit (not looping), whatever the limit: what a
    # requeue after raising max tokens sends back (the max-tokens dialog offers it).
    truncated: int | None = None

    @property
    def remaining(self) -> int:
        return self.pending + self.in_flight

    @property
    def finished(self) -> bool:
        return self.total > 0 and self.remaining == 0


@dataclass(frozen=True)
class Rates(Record):
    """Throughput over the last `window_s` seconds (not since start)."""
    req_per_s: float
    tok_per_s: float             # output tokens
    avg_output_tokens: float     # over the window's completions
    completions: int             # in the window
    window_s: float              # the configured window
    span_s: float                # how much time the figures cover (< window_s while warming up)
    warming_up: bool             # the job has not run a whole window yet


@dataclass(frozen=True)
class Eta(Record):
    """Time to finish the remaining prompts."""
    seconds: float | None        # None: unknown (no completions in the window yet)
    warming_up: bool             # the rate behind it does not cover a whole window yet
    basis: str = "windowed req/s"   # how it was estimated
    # An interval around `seconds` (e.g. 80%: low_s..high_s) where the estimator gives one.
    low_s: float | None = None
    high_s: float | None = None
    interval: float | None = None   # the interval's coverage, 0..1
    reason: str | None = None       # what is not known yet, while warming up
    windowed_s: float | None = None  # the windowed req/s ETA, for comparison
    # Why `seconds` is None though prompts remain: "paused", "no server up" (a rate from
    # before would count down while nothing is generated).
    held: str | None = None


@dataclass(frozen=True)
class ProblemCount(Record):
    problem: str                 # empty_content, missing_reasoning, think_markers, truncated
    count: int


@dataclass(frozen=True)
class Quality(Record):
    """Output checks over the last `window` completions, and totals since the daemon started."""
    window: int                  # completions the rates look at (at most)
    samples: int                 # completions in the window now
    bad_rate: float              # 0..1
    truncation_rate: float       # 0..1, finish_reason "length"
    problems: tuple[ProblemCount, ...]
    checked_total: int
    bad_total: int
    truncated_total: int
    tripped: str | None          # why the gate pauses dispatch now, if it does
    # Truncated answers whose tail repeats itself (a degenerate loop), where detected.
    loop_rate: float | None = None
    looping_total: int | None = None
    # Truncated and not looping: merely long, worth a re-run at a higher limit.
    long_rate: float | None = None
    # Truncated split by where the cut fell: inside the thinking (content empty, all text in
    # reasoning: no answer at all) or in the answer. They add up to truncation_rate.
    thinking_truncated_rate: float | None = None
    answer_truncated_rate: float | None = None
    thinking_truncated_total: int | None = None
    # The share of thinking-truncated answers that pauses dispatch (1: never).
    max_thinking_truncated_rate: float | None = None
    # Watching streamed requests, since the daemon started: loops aborted while they ran and
    # the tokens that saved (max tokens minus tokens generated), requests aborted as stalled.
    loops_aborted_total: int | None = None
    loop_tokens_saved: int | None = None
    stalled_total: int | None = None


@dataclass(frozen=True)
class ErrorCount(Record):
    kind: str                    # "HTTP 400", "HTTP 503", "timeout", "connection", ...
    count: int


@dataclass(frozen=True)
class Breaker(Record):
    """The circuit breaker over the last `window` requests' answers: when more than
    `threshold` of them were errors it opens and pauses dispatch (source "breaker") until
    an operator resumes. Errors while it is open send their prompt back to pending."""
    window: int                  # answers the rate looks at (at most)
    samples: int                 # answers in the window now
    error_rate: float            # 0..1
    threshold: float             # dispatch.breaker_error_rate
    errors: tuple[ErrorCount, ...]   # errors in the window, by kind
    requests_total: int          # answers since the daemon started
    errors_total: int
    tripped: str | None = None   # why it is open ("95% of the last 200 requests failed ...")
    tripped_error: str | None = None   # the kind of error that opened it
    sample: str | None = None    # one whole message of that error
    last_error: str | None = None      # the newest error message in the window


@dataclass(frozen=True)
class PauseReason(Record):
    source: str                  # operator, quality, breaker, disk, ... (each lifted on its own)
    reason: str


@dataclass(frozen=True)
class Histogram(Record):
    """Output lengths (completion tokens) of recent completions, to draw with max tokens
    marked: a pile-up just below the marker is truncation. Bucket i holds lengths in
    [edges[i], edges[i+1]); the last bucket includes its upper edge."""
    edges: tuple[int, ...]       # len(counts) + 1, increasing
    counts: tuple[int, ...]
    samples: int                 # completions counted
    max_tokens: int              # the live limit (the marker)

    def __post_init__(self) -> None:
        if len(self.edges) != len(self.counts) + 1 and (self.edges or self.counts):
            raise ValueError(f"{len(self.edges)} edges for {len(self.counts)} buckets")


@dataclass(frozen=True)
class ThroughputPoint(Record):
    time: float
    req_per_s: float
    tok_per_s: float


# -- the waste ledger -------------------------------------------------------------------------

@dataclass(frozen=True)
class WasteCount(Record):
    cause: str                   # crash, stop, loop, stall, retry, requeue (waste_causes.py)
    requests: int
    tokens: int


@dataclass(frozen=True)
class Waste(Record):
    """Generated tokens kept in the output and thrown away, by cause, over the whole job
    (the state DB's ledger). goodput = kept / (kept + wasted)."""
    kept_tokens: int = 0
    wasted_tokens: int = 0
    goodput: float | None = None     # 0..1; None before any token was generated
    causes: tuple[WasteCount, ...] = ()   # every cause, zeros included
    # Answers continued from their stored tokens after a raise of max tokens, and the tokens
    # that did not have to be decoded again (counted once per continuation; not generated).
    continued_answers: int = 0
    continued_tokens: int = 0

    @property
    def generated_tokens(self) -> int:
        return self.kept_tokens + self.wasted_tokens


# -- uploads ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Uploads(Record):
    destination: str             # s3://bucket/prefix/ or a directory
    remote: bool                 # False for a local output directory
    backlog_shards: int          # assigned or written, not yet verified at the destination
    backlog_bytes: int
    uploaded_shards: int         # verified at the destination (whole job)
    uploaded_bytes: int
    in_flight: int
    bytes_per_s: float
    shards_per_s: float
    last_success_at: float | None
    consecutive_failures: int
    last_error: str | None
    corrupt_total: int           # uploads caught holding the wrong bytes (this run)
    stopped: str | None          # why uploads stopped (credentials, bucket), until restart


# -- events -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Caller(Record):
    """Who asked, from the socket's peer credentials (SO_PEERCRED): not self-reported."""
    uid: int
    user: str                    # the uid's name, or the uid as text when it has none
    pid: int
    gid: int | None = None


@dataclass(frozen=True)
class Event(Record):
    """One row of the state DB's events table (the audit log)."""
    id: int
    time: float
    kind: str                    # server_state, max_tokens, paused, control_action, ...
    subject: str                 # a server (gpu1), job, dispatch, generation, a shard key
    actor: str                   # supervisor, quality-gate, disk-guard, or user:NAME
    detail_json: str             # the row's detail: a JSON object, kind-specific
    caller: Caller | None = None  # for actions over the socket

    def detail(self) -> dict[str, Any]:
        try:
            value = json.loads(self.detail_json)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


# -- the snapshot -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Status(Record):
    schema_version: int
    time: float                  # when the snapshot was taken
    started_at: float            # when this daemon started
    daemon_pid: int
    model: str
    max_tokens: int              # applies to requests sent from now on
    context_length: int | None   # the servers' context-length flag, where set
    job: JobCounts
    rates: Rates
    eta: Eta
    quality: Quality
    paused: tuple[PauseReason, ...]   # empty: dispatching
    servers: tuple[ServerStatus, ...]
    gpus: Gpus
    uploads: Uploads | None      # None: this job writes no shards anywhere that needs watching
    output_lengths: Histogram
    throughput: tuple[ThroughputPoint, ...] = ()   # recent history, oldest first (sparkline)
    recent_events: tuple[Event, ...] = ()          # oldest first
    energy: Energy | None = None
    partition: str | None = None   # "I/N" for a node of a many-node job (job.partition)
    stopping: str | None = None    # a graceful stop in progress ("draining: 12 requests in
                                   # flight, 87 s of grace left"); None while running
    last_reload: str | None = None  # the last config reload's outcome (applied / refused)
    breaker: Breaker | None = None  # None: a daemon from before the breaker
    waste: Waste | None = None      # None: a daemon from before the waste ledger
    continuation: Continuation | None = None   # None: a daemon that cannot continue answers
    job_name: str | None = None     # the `job` label of /metrics (control.metrics_job)
    tuning: Tuning | None = None    # None: a daemon without the tuner (contract/tuning.py)

    @classmethod
    def from_json(cls, text: str | bytes) -> Status:
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ContractError(f"not JSON: {exc}") from None
        return cls.from_plain(data)

    @classmethod
    def from_plain(cls, data: Any) -> Status:
        version = data.get("schema_version") if isinstance(data, dict) else None
        if isinstance(version, int) and version != SCHEMA_VERSION:
            raise ContractError(f"the daemon serves status schema {version}, this client "
                                f"reads {SCHEMA_VERSION}: upgrade the older side")
        return from_plain(cls, data)

    def paused_by(self, source: str) -> str | None:
        return next((p.reason for p in self.paused if p.source == source), None)

    def server(self, name: str) -> ServerStatus | None:
        return next((s for s in self.servers if s.name == name), None)


@dataclass(frozen=True)
class Gap(Record):
    """In the event stream: this reader fell behind and `dropped` items were skipped."""
    dropped: int


# One NDJSON line of /v1/events: {"type": "status"|"event"|"gap", "data": {...}}.
StreamItem = Status | Event | Gap
_STREAM_TYPES: dict[str, type] = {"status": Status, "event": Event, "gap": Gap}


def stream_line(item: StreamItem) -> str:
    kind = {Status: "status", Event: "event", Gap: "gap"}[type(item)]
    return f'{{"type":"{kind}","data":{dumps(item)}}}\n'


def parse_stream_line(line: str | bytes) -> StreamItem:
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ContractError(f"event stream: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("type") not in _STREAM_TYPES:
        raise ContractError("event stream: a line without a known type")
    cls = _STREAM_TYPES[data["type"]]
    if cls is Status:
        return Status.from_plain(data.get("data"))
    return from_plain(cls, data.get("data"), data["type"])
