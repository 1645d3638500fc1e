"""Fixed contract data: a busy job with every field set to a non-default value, for tests
that need a Status without a daemon (round trips, the TUI's snapshots)."""

from __future__ import annotations

from dataclasses import replace

from supervisor.contract.status import (SCHEMA_VERSION, Caller, Energy, Eta, Event, Flag,
                                        GpuStatus, Gpus, Histogram, JobCounts, PauseReason,
                                        ProblemCount, Quality, Rates, ServerState, ServerStatus,
                                        Status, ThroughputPoint, Uploads)

T0 = 1_764_000_000.0


def server(i: int, state: ServerState = ServerState.READY, **changes: object) -> ServerStatus:
    s = ServerStatus(
        name=f"gpu{i}", gpus=(i,), port=30000 + i, state=state,
        state_reason="health_generate answered 200", state_since=T0 - 3600 - i,
        pid=4000 + i, uptime_s=3600.0 + i, in_flight=60 + i, max_running=64, req_per_s=1.25,
        tok_per_s=2540.5, restarts=i, failures_in_window=0,
        last_exit_reason="oom: CUDA out of memory" if i else None,
        flags=(Flag("mem-fraction-static", 0.88), Flag("max-running-requests", 64),
               Flag("enable-metrics", True), Flag("reasoning-parser", "qwen3")),
        argv=("python", "-m", "sglang.launch_server", "--port", str(30000 + i)),
        sglang_metrics=True, sglang_running=52 + i, sglang_queued=8 if i == 1 else 0,
        token_usage=0.91, retractions=17 * i, retractions_per_s=0.25 * i,
        gen_throughput=2210.5, sglang_error=None if i else "/metrics: HTTP 503",
        overcommitted=i == 1,
        overcommit_reason="queue held over 3 polls (8 -> 8 waiting) while running 53 of our "
                          "61 in flight" if i == 1 else None)
    return replace(s, **changes)  # type: ignore[arg-type]


def gpu(i: int) -> GpuStatus:
    return GpuStatus(index=i, name="NVIDIA H200", server=f"gpu{i}", power_w=612.5,
                     power_limit_w=700.0, utilization_pct=97.0,
                     memory_used_bytes=130_000_000_000, memory_total_bytes=143_771_000_000,
                     temperature_c=71.0, errors=("sm_clock: Not Supported",), energy_j=9.5e8)


def status(servers: int = 8, **changes: object) -> Status:
    s = Status(
        schema_version=SCHEMA_VERSION, time=T0, started_at=T0 - 7200.0, daemon_pid=1234,
        model="nvidia/Nemotron-H-8B", max_tokens=8192, context_length=32768,
        job=JobCounts(total=900_000, done=312_345, pending=587_000, in_flight=500, failed=155,
                      requeueable_truncated=4_321, truncated=50_000),
        rates=Rates(req_per_s=9.4, tok_per_s=19_500.25, avg_output_tokens=2074.5,
                    completions=564, window_s=60.0, span_s=60.0, warming_up=False),
        eta=Eta(seconds=62_500.0, warming_up=False, basis="windowed req/s", low_s=58_000.0,
                high_s=70_000.0, interval=0.8),
        quality=Quality(window=200, samples=200, bad_rate=0.015, truncation_rate=0.18,
                        problems=(ProblemCount("truncated", 36), ProblemCount("empty_content", 3)),
                        checked_total=312_400, bad_total=2_100, truncated_total=50_000,
                        tripped=None, loop_rate=0.04, looping_total=1_200),
        paused=(PauseReason("operator", "checking shard 42"),
                PauseReason("disk", "spool has 0.8 GB free, below 1.0 GB")),
        servers=tuple(server(i) for i in range(servers)),
        gpus=Gpus(available=True, reason=None, sampled_at=T0 - 1.0, driver_version="550.54",
                  gpus=tuple(gpu(i) for i in range(servers))),
        uploads=Uploads(destination="s3://bucket/run-7/", remote=True, backlog_shards=3,
                        backlog_bytes=45_000_000, uploaded_shards=620,
                        uploaded_bytes=9_300_000_000, in_flight=2, bytes_per_s=1.5e6,
                        shards_per_s=0.1, last_success_at=T0 - 12.0, consecutive_failures=1,
                        last_error="SlowDown: reduce your request rate", corrupt_total=0,
                        stopped=None),
        output_lengths=Histogram(edges=tuple(range(0, 8192 + 1, 1024)),
                                 counts=(10, 40, 60, 30, 20, 10, 5, 25), samples=200,
                                 max_tokens=8192),
        throughput=tuple(ThroughputPoint(T0 - 10 * k, 9.0 + k / 10, 19_000.0 + k)
                         for k in range(30, 0, -1)),
        recent_events=(
            Event(id=101, time=T0 - 30, kind="server_state", subject="gpu1",
                  actor="supervisor",
                  detail_json='{"from":"READY","to":"BACKOFF","reason":"oom"}'),
            Event(id=102, time=T0 - 5, kind="max_tokens", subject="generation",
                  actor="user:alice", detail_json='{"from":4096,"to":8192}',
                  caller=Caller(uid=1001, user="alice", pid=5555, gid=1001))),
        energy=Energy(joules_per_token=0.21, kwh_so_far=310.5, kwh_projected=890.0,
                      source="counter"))
    return replace(s, **changes)  # type: ignore[arg-type]
