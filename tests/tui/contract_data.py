"""Fixed status-contract data for the TUI's tests: an 8-GPU job mid-run, and the ways it
goes wrong. Built only from the contract, exactly as the daemon would serve it."""

from __future__ import annotations

import json
from dataclasses import replace

from supervisor.contract.status import (SCHEMA_VERSION, Breaker, Caller, Energy, ErrorCount, Eta,
                                        Event, Flag, GpuStatus, Gpus, Histogram, JobCounts,
                                        PauseReason, ProblemCount, Quality, Rates, ServerState,
                                        ServerStatus, Status, ThroughputPoint, Uploads)

T0 = 1_796_270_000.0          # the snapshot's time (fixed: "ago" figures are relative to it)
GIB = 2**30
FLAGS = (Flag("mem-fraction-static", 0.93), Flag("max-running-requests", 64),
         Flag("max-mamba-cache-size", 200), Flag("context-length", 32768),
         Flag("enable-metrics", True))


def server(i: int, state: ServerState = ServerState.READY, **changes: object) -> ServerStatus:
    ready = state is ServerState.READY
    s = ServerStatus(
        name=f"gpu{i}", gpus=(i,), port=30000 + i, state=state,
        state_reason="health_generate answered 200" if ready else "",
        state_since=T0 - 3600 - 60 * i, pid=41000 + i if ready else None,
        uptime_s=3600.0 + 60 * i if ready else None,
        in_flight=60 + i % 5 if ready else 0, max_running=64,
        req_per_s=1.2 + 0.05 * i if ready else 0.0,
        tok_per_s=2400.0 + 90 * i if ready else 0.0,
        restarts=1 if i == 3 else 0, failures_in_window=0,
        last_exit_reason="oom: CUDA out of memory. Tried to allocate 2.00 GiB" if i == 3 else None,
        flags=FLAGS, argv=("python", "-m", "sglang.launch_server", "--port", str(30000 + i)))
    return replace(s, **changes)  # type: ignore[arg-type]


def gpu(i: int) -> GpuStatus:
    return GpuStatus(index=i, name="NVIDIA H100 80GB HBM3", server=f"gpu{i}",
                     power_w=560.0 + 11 * i, power_limit_w=700.0,
                     utilization_pct=96.0 - i, memory_used_bytes=int((74.0 + i % 3) * GIB),
                     memory_total_bytes=80 * GIB, temperature_c=61.0 + i)


def histogram(max_tokens: int = 4096) -> Histogram:
    edges = tuple(range(0, 4096 + 1, 256))
    counts = (4, 18, 60, 130, 210, 260, 270, 240, 200, 160, 120, 90, 70, 55, 45, 40)
    # A pile-up of completions cut off at the limit lands in the last bucket.
    counts = counts[:-1] + (counts[-1] + 300,)
    return Histogram(edges=edges, counts=counts, samples=sum(counts), max_tokens=max_tokens)


def event(i: int, kind: str, subject: str, detail: dict, actor: str = "supervisor",
          caller: Caller | None = None) -> Event:
    return Event(id=i, time=T0 - 600 + 37 * i, kind=kind, subject=subject, actor=actor,
                 detail_json=json.dumps(detail), caller=caller)


ALICE = Caller(uid=1001, user="alice", pid=52311, gid=1001)

EVENTS = (
    event(101, "job_started", "job", {"pid": 40001, "servers": 8}),
    event(102, "server_state", "gpu3", {"from": "READY", "to": "BACKOFF",
                                        "reason": "oom: CUDA out of memory", "cause": "oom"}),
    event(103, "server_state", "gpu3", {"from": "BACKOFF", "to": "STARTING",
                                        "reason": "restart after backoff"}),
    event(104, "server_state", "gpu3", {"from": "STARTING", "to": "READY",
                                        "reason": "health_generate answered 200"}),
    event(105, "max_tokens", "generation", {"from": 2048, "to": 4096}, "user:alice", ALICE),
    event(106, "requeue_truncated", "generation", {"count": 412, "below_max_tokens": 4096},
          "user:alice", ALICE),
)


def healthy(servers: int = 8) -> Status:
    return Status(
        schema_version=SCHEMA_VERSION, time=T0, started_at=T0 - 5 * 3600 - 420,
        daemon_pid=40001, model="Qwen/Qwen3-Next-80B-A3B-Thinking", max_tokens=4096,
        context_length=32768,
        job=JobCounts(total=900_000, done=171_234, pending=728_254, in_flight=500, failed=12,
                      requeueable_truncated=412, truncated=29_977),
        rates=Rates(req_per_s=9.4, tok_per_s=20_470.0, avg_output_tokens=2177.0,
                    completions=564, window_s=60.0, span_s=60.0, warming_up=False),
        eta=Eta(seconds=77_525.0, warming_up=False),
        quality=Quality(window=200, samples=200, bad_rate=0.015, truncation_rate=0.175,
                        problems=(ProblemCount("truncated", 35), ProblemCount("empty_content", 3)),
                        checked_total=171_246, bad_total=2_569, truncated_total=29_977,
                        tripped=None),
        paused=(),
        servers=tuple(server(i) for i in range(servers)),
        gpus=Gpus(available=True, reason=None, sampled_at=T0 - 1, driver_version="550.54.15",
                  gpus=tuple(gpu(i) for i in range(servers))),
        uploads=Uploads(destination="s3://dflash-data/runs/2026-12-03/", remote=True,
                        backlog_shards=2, backlog_bytes=23_400_000, uploaded_shards=340,
                        uploaded_bytes=3_978_000_000, in_flight=1, bytes_per_s=1_950_000.0,
                        shards_per_s=0.017, last_success_at=T0 - 42, consecutive_failures=0,
                        last_error=None, corrupt_total=0, stopped=None),
        output_lengths=histogram(),
        throughput=tuple(ThroughputPoint(time=T0 - 600 + 10 * k,
                                         req_per_s=8.0 + (k % 7) * 0.3 + (2.0 if k > 40 else 0),
                                         tok_per_s=18_000.0 + 300 * (k % 5))
                         for k in range(61)),
        recent_events=EVENTS,
    )


def paused_by_quality() -> Status:
    s = healthy()
    reason = ("bad output: 62% of the last 200 completions (threshold 50%): "
              "empty_content 118, think_markers 6")
    return replace(s, paused=(PauseReason("quality", reason),),
                   quality=replace(s.quality, bad_rate=0.62, tripped=reason),
                   rates=replace(s.rates, req_per_s=0.0, tok_per_s=0.0))


def with_failed_server() -> Status:
    s = healthy()
    failed = server(5, ServerState.FAILED, restarts=5, failures_in_window=5,
                    state_reason="oom: CUDA out of memory; 5 failures within 600s",
                    last_exit_reason="oom: Not enough memory. Please try to increase "
                                     "--mem-fraction-static")
    servers = tuple(failed if x.name == "gpu5" else x for x in s.servers)
    return replace(s, servers=servers)


def uploads_stopped() -> Status:
    s = healthy()
    assert s.uploads is not None
    return replace(s, uploads=replace(
        s.uploads, backlog_shards=14, backlog_bytes=163_800_000, consecutive_failures=3,
        stopped="bucket dflash-data does not exist (NoSuchBucket)",
        last_error="NoSuchBucket: The specified bucket does not exist"))


def with_insight() -> Status:
    """The length-aware ETA's interval, a loop share and the job's energy."""
    s = healthy()
    servers = tuple(replace(x, tokens_per_joule=2.6 + 0.1 * i) for i, x in enumerate(s.servers))
    return replace(
        s, servers=servers,
        eta=replace(s.eta, basis="output tokens (Kaplan-Meier lengths)", low_s=74_100.0,
                    high_s=81_300.0, interval=0.8, windowed_s=69_800.0),
        quality=replace(s.quality, loop_rate=0.055, looping_total=9_114, long_rate=0.12),
        energy=Energy(joules_per_token=0.37, kwh_so_far=412.6, kwh_projected=2_170.0,
                      source="counter"))


LORA = ("HTTP 400: LoRA adapter 'v2' was requested, but LoRA is not enabled. Please launch the "
        "server with --enable-lora flag and preload adapters using --lora-paths or "
        "/load_lora_adapter endpoint.")


def paused_by_breaker() -> Status:
    """`job.model` with a ':' after a reload: SGLang refuses every request, the breaker opens."""
    s = healthy()
    reason = f"97% of the last 200 requests failed (threshold 50%): {LORA}"
    return replace(s, paused=(PauseReason("breaker", reason),),
                   breaker=Breaker(window=200, samples=200, error_rate=0.97, threshold=0.5,
                                   errors=(ErrorCount("HTTP 400", 194),),
                                   requests_total=171_440, errors_total=203, tripped=reason,
                                   tripped_error="HTTP 400", sample=LORA, last_error=LORA),
                   rates=replace(s.rates, req_per_s=0.0, tok_per_s=0.0))


def thinking_cut_off() -> Status:
    """The "87% empty answers" job: max tokens runs out inside the thinking; the gate pauses."""
    s = healthy()
    reason = ("truncated inside the thinking: 84% of the last 200 completions hit max_tokens "
              "before any answer began (threshold 50%): raise max_tokens or shorten the "
              "thinking")
    return replace(s, paused=(PauseReason("quality", reason),),
                   quality=replace(s.quality, truncation_rate=0.87, thinking_truncated_rate=0.84,
                                   answer_truncated_rate=0.03, thinking_truncated_total=168,
                                   max_thinking_truncated_rate=0.5, tripped=reason),
                   rates=replace(s.rates, req_per_s=0.0, tok_per_s=0.0))
