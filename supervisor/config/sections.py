"""The job config's sections: every key, its type and its default, and the error a bad one
raises. Parsing and checking are beside this (coerce.py, checks.py, load.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


class ConfigError(ValueError):
    """A config value that cannot be used; the message names the key."""


@dataclass(frozen=True)
class Partition:
    index: int
    count: int

    @classmethod
    def parse(cls, text: str, key: str = "job.partition") -> Partition:
        try:
            left, right = text.split("/")
            index, count = int(left), int(right)
        except ValueError:
            raise ConfigError(f"{key}: expected I/N (e.g. 0/8), got {text!r}") from None
        if count < 1 or not 0 <= index < count:
            raise ConfigError(f"{key}: need 0 <= I < N, got {text!r}")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class JobSection:
    prompts: str = "prompts.jsonl"
    state: str = "job.db"
    # A local directory, or s3://bucket/prefix/
    output: str = "output"
    shard_size: int = 500
    model: str = "default"
    # "I/N", or "auto" in the file: resolved at load from the scheduler's environment.
    partition: Partition | None = None
    # The node count for a Kubernetes Indexed Job (0 = DFLASH_PARTITION_COUNT).
    partition_count: int = 0
    # Exact token ids kept in the state DB (4 bytes a token): "truncated" keeps those of
    # every answer that ends at its max tokens (what continuing it needs), "all" of every
    # answer.
    keep_token_ids: str = "truncated"
    # Shard lines carry the sampled `output_ids` (needs keep_token_ids = "all"), so a
    # trainer reads the model's own tokens instead of re-tokenizing the text.
    shard_output_ids: bool = False


@dataclass(frozen=True)
class GenerationSection:
    max_tokens: int = 4096
    temperature: float = 0.6
    top_p: float = 0.95
    enable_thinking: bool = True


@dataclass(frozen=True)
class ServersSection:
    # Either an explicit GPU list or a count (count=N means GPUs 0..N-1).
    gpus: tuple[int, ...] = ()
    count: int = 0
    tp_size: int = 1
    host: str = "127.0.0.1"
    base_port: int = 30000
    # The launch command before the flags; real SGLang by default.
    command: tuple[str, ...] = ("python", "-m", "sglang.launch_server")
    model_path: str = ""
    # Pass-through SGLang flags, in order: {"mem-fraction-static": 0.88, "enable-metrics": true}
    flags: Mapping[str, Any] = field(default_factory=dict)
    log_dir: str = "logs"
    startup_timeout_s: float = 1200.0
    health_interval_s: float = 5.0
    # Above SGLang's own 20 s: /health_generate waits that long for the scheduler to make
    # progress before its 503 (`sglang/srt/entrypoints/http_server.py:218`), so a loaded
    # server may answer 200 after 15 s; a shorter probe would count that as a failure.
    health_timeout_s: float = 30.0
    health_failures: int = 3
    # Hung: requests in flight and no token from the server for this long (none of its
    # streams produced one, nor SGLang's decode-token counter moved). Completions never
    # decide it: a long thinking answer takes many minutes. Without either token signal
    # (dispatch.stream off and no --enable-metrics), no completion for the longest answer
    # at the measured speed (servers/hang_rule.py), never less than this.
    hang_timeout_s: float = 600.0
    stop_grace_s: float = 30.0
    drain_timeout_s: float = 300.0
    backoff_initial_s: float = 5.0
    backoff_max_s: float = 300.0
    # More than max_failures failures within failure_window_s → FAILED until an operator acts.
    max_failures: int = 5
    failure_window_s: float = 1800.0
    # ... or this many lives in a row ended in failure without serving (0: never): a life
    # served when its token progress lasted served_after_s. A hang caught only after
    # hang_timeout_s never fills the window above; this count still ends the loop.
    max_unserved_failures: int = 5
    served_after_s: float = 300.0
    # Who runs the server processes (servers/launcher.py): "process" (the daemon's own
    # children, each in its own session), "systemd" (a unit per server, so a restart of the
    # daemon's service leaves them running), "auto" (systemd when the daemon is a systemd
    # service and the template unit is installed, else process).
    launcher: str = "auto"
    # SGLang servers the daemon did not launch (separate Slurm jobs, pods), "http://host:port"
    # each: supervised and fed like its own servers, but never started, restarted or stopped
    # (servers/attached_server.py). Named ext0, ext1, ... in the order given.
    attach: tuple[str, ...] = ()

    @property
    def own_servers(self) -> bool:
        """Whether the daemon launches servers of its own (an attach-only job has none)."""
        return bool(self.gpu_list)

    @property
    def gpu_list(self) -> tuple[int, ...]:
        return self.gpus if self.gpus else tuple(range(self.count))

    def max_running_requests(self) -> int | None:
        value = self.flags.get("max-running-requests")
        return int(value) if value is not None else None

    @property
    def context_length(self) -> int | None:
        """The servers' --context-length flag as a number, where set: every check against it
        (config, reload, live max tokens) and the status read this one. TOML may give it as
        "32768" (SGLang's argparse takes either)."""
        value = self.flags.get("context-length")
        if value is None:
            return None
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"servers.flags.context-length: must be an integer >= 1, "
                              f"got {value!r}")
        return value


@dataclass(frozen=True)
class DispatchSection:
    # 0 → follow the server: its --max-running-requests flag, else the limit SGLang reports
    # on /server_info once READY (effective_max_running_requests_per_dp per DP rank).
    max_in_flight_per_server: int = 0
    request_timeout_s: float = 3600.0
    max_attempts: int = 3
    claim_batch: int = 64
    # On SIGTERM, how long requests in flight may run to completion before they are cut
    # off and requeued (0 = requeue at once). Minutes of GPU work per stop are worth a wait.
    stop_grace_s: float = 120.0
    # The circuit breaker: pause dispatch when more than this share of the last
    # breaker_window answers were errors (once breaker_min_samples are in). One bad setting
    # fails every request in milliseconds; this stops it before every prompt is failed.
    breaker_error_rate: float = 0.5
    breaker_window: int = 200
    breaker_min_samples: int = 50
    # Stream each answer (SSE, with our own request id) so a request is watched while it
    # decodes: stalls and loops are aborted on the server by id. False: one plain POST per
    # answer (a server or proxy that does not stream).
    stream: bool = True
    # A streamed request with no new token for this long, while its server makes no token
    # for anyone, is stalled: aborted and retried (an attempt counted; on a server that is
    # queueing or retracting, requeued without one); several on one server mark it hung
    # (dispatch/stall_watch.py).
    stall_s: float = 120.0
    # A streamed request silent while its server streams for others is waiting (SGLang
    # queued it by KV budget, retracted it, or it sits behind a long prefill): aborted only
    # after this long without a token, and never counted toward a hang.
    wait_s: float = 1800.0
    # This many stalled requests on one server within stall_hang_window_s mark it hung
    # (restarted as a hang). 0: never.
    stall_hang_count: int = 3
    stall_hang_window_s: float = 300.0
    # The saturation guard (servers/saturation_guard.py): when SGLang's /metrics show a
    # server queueing or retracting what we send, or its throughput collapsing, its
    # in-flight limit is lowered live (never below saturation_floor), and raised back one
    # step per saturation_calm_s without a sign. Needs SGLang's --enable-metrics.
    saturation_guard: bool = True
    saturation_floor: int = 4
    saturation_calm_s: float = 60.0
    # Throughput under this share of its recent peak, as busy as then, is a collapse (0: off).
    saturation_collapse_ratio: float = 0.5


@dataclass(frozen=True)
class QualitySection:
    window: int = 200
    min_samples: int = 50
    max_bad_rate: float = 0.5
    # Truncation alone is reported but does not pause the job unless this is set below 1.
    max_truncation_rate: float = 1.0
    # Pause when more than this share of the window ran into max_tokens looping (degenerate
    # repetition: a model or sampling problem a higher limit does not fix). 1 = never.
    max_loop_rate: float = 1.0
    # Pause when more than this share of the window was cut off inside the thinking (finish
    # reason length, empty content, all text in reasoning): the budget ran out before any
    # answer began, the "87% empty answers" incident. 1 = never.
    max_thinking_truncated_rate: float = 0.5
    metrics_window_s: float = 60.0


@dataclass(frozen=True)
class UploadsSection:
    endpoint_url: str | None = None
    region: str | None = None
    concurrency: int = 4
    keep_local: bool = False
    multipart_threshold_bytes: int = 64 * 1024 * 1024
    multipart_part_bytes: int = 16 * 1024 * 1024
    # Send S3's x-amz-checksum-sha256 besides Content-MD5 (off for stores that reject it).
    sha256_checksum: bool = True
    # One request's connect/read limit; botocore retries a request a few times within it.
    timeout_s: float = 60.0
    # Backoff between failed uploads: doubles from retry_initial_s up to retry_max_s.
    retry_initial_s: float = 1.0
    retry_max_s: float = 120.0
    # At the end of a finished job, how long to wait for the backlog to drain.
    drain_timeout_s: float = 600.0
    min_free_bytes: int = 1024 * 1024 * 1024
    spool_dir: str = "spool"


@dataclass(frozen=True)
class BackupSection:
    # Copy the state DB beside the shards (under the partition's key) so a replacement node
    # resumes exactly. None = when job.partition is set (a node of a many-node job).
    enabled: bool | None = None
    # Seconds between backups while the job runs (0 = only at start and stop).
    interval_s: float = 900.0
    # With no state DB at start, take this partition's backup from the output if there is one.
    restore: bool = True


@dataclass(frozen=True)
class ControlSection:
    # Empty: $RUNTIME_DIRECTORY/control.sock under systemd, else beside the state DB.
    socket: str = ""
    # The socket's group (name or gid); its members may watch and act, like docker.sock's.
    group: str = ""
    # How often the event stream carries a fresh snapshot.
    interval_s: float = 1.0


@dataclass(frozen=True)
class JobConfig:
    job: JobSection = JobSection()
    generation: GenerationSection = GenerationSection()
    servers: ServersSection = ServersSection()
    dispatch: DispatchSection = DispatchSection()
    quality: QualitySection = QualitySection()
    uploads: UploadsSection = UploadsSection()
    backup: BackupSection = BackupSection()
    control: ControlSection = ControlSection()
    # Relative paths in the file are relative to the file's directory.
    base_dir: Path = Path(".")

    def path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base_dir / p

    @property
    def output_is_s3(self) -> bool:
        return self.job.output.startswith("s3://")

    @property
    def backups_enabled(self) -> bool:
        enabled = self.backup.enabled
        return self.job.partition is not None if enabled is None else enabled


SECTIONS: dict[str, type] = {
    "job": JobSection,
    "generation": GenerationSection,
    "servers": ServersSection,
    "dispatch": DispatchSection,
    "quality": QualitySection,
    "uploads": UploadsSection,
    "backup": BackupSection,
    "control": ControlSection,
}
