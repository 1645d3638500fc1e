"""The job's TOML configuration: parsing, defaults and validation.

Every key is known; an unknown key or a bad value is refused with the key's dotted path and
what is allowed, because a typo in a day-long job's config must fail at start, not at 3 a.m.
"""

from __future__ import annotations

import logging
import math
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
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
    health_timeout_s: float = 10.0
    health_failures: int = 3
    # Requests in flight but none completing for this long means the server is hung.
    hang_timeout_s: float = 600.0
    stop_grace_s: float = 30.0
    drain_timeout_s: float = 300.0
    backoff_initial_s: float = 5.0
    backoff_max_s: float = 300.0
    # More than max_failures failures within failure_window_s → FAILED until an operator acts.
    max_failures: int = 5
    failure_window_s: float = 1800.0

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
    # A streamed request with no new token for this long is aborted and retried (an
    # attempt counted); several on one server mark it hung (dispatch/stall_watch.py).
    stall_s: float = 120.0
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


_SECTIONS: dict[str, type] = {
    "job": JobSection,
    "generation": GenerationSection,
    "servers": ServersSection,
    "dispatch": DispatchSection,
    "quality": QualitySection,
    "uploads": UploadsSection,
    "backup": BackupSection,
    "control": ControlSection,
}


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(key: str, value: Any, annotation: str) -> Any:
    """Check one value against its field's annotation (annotations are strings here)."""
    ann = annotation.replace(" ", "")
    optional = ann.endswith("|None")
    if optional:
        if value is None:
            return None
        ann = ann[: -len("|None")]
    if ann == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if ann == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if ann == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        # TOML has nan and inf; no setting here means anything with them (an infinite
        # timeout passes "> 0" and then crashes the first sleep or deadline computed from it).
        if not math.isfinite(value):
            raise ConfigError(f"{key}: must be a finite number, got {value!r}")
        return float(value)
    if ann == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if ann == "Partition":
        if value == "auto":
            # Resolved by parse_config, which knows the environment and partition_count.
            return value
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected \"I/N\" as a string, got {value!r}")
        return Partition.parse(value, key)
    if ann == "tuple[int,...]":
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise ConfigError(f"{key}: expected a list of integers, got {value!r}")
        return tuple(value)
    if ann == "tuple[str,...]":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a non-empty list of strings, got {value!r}")
        return tuple(value)
    if ann == "Mapping[str,Any]":
        return _check_flags(key, value)
    raise AssertionError(f"no coercion for {annotation}")


def _check_flags(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a table of SGLang flags, got {value!r}")
    out: dict[str, Any] = {}
    for name, v in value.items():
        if name.startswith("-"):
            raise ConfigError(f"{key}.{name}: write flag names without the leading dashes")
        if isinstance(v, dict) or (isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v)):
            raise ConfigError(f"{key}.{name}: a flag value is a string, number, boolean or list")
        out[name] = v
    return out


def _build_section(name: str, cls: type, raw: Any) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"[{name}]: expected a table")
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            allowed = ", ".join(sorted(known))
            raise ConfigError(f"{name}.{key}: unknown key (allowed: {allowed})")
        kwargs[key] = _coerce(f"{name}.{key}", value, str(known[key].type))
    return cls(**kwargs)


def _validate(cfg: JobConfig) -> None:
    def positive(key: str, value: float) -> None:
        if value <= 0:
            raise ConfigError(f"{key}: must be > 0, got {value}")

    positive("job.shard_size", cfg.job.shard_size)
    positive("generation.max_tokens", cfg.generation.max_tokens)
    if not 0 <= cfg.generation.temperature <= 2:
        raise ConfigError(f"generation.temperature: must be within 0..2, got {cfg.generation.temperature}")
    if not 0 < cfg.generation.top_p <= 1:
        raise ConfigError(f"generation.top_p: must be within (0, 1], got {cfg.generation.top_p}")
    s = cfg.servers
    if s.gpus and s.count:
        raise ConfigError("servers: set either gpus or count, not both")
    if not s.gpu_list:
        raise ConfigError("servers: set gpus = [0, 1, ...] or count = N (N >= 1)")
    if len(set(s.gpu_list)) != len(s.gpu_list):
        raise ConfigError(f"servers.gpus: a GPU is listed twice: {list(s.gpu_list)}")
    positive("servers.tp_size", s.tp_size)
    if len(s.gpu_list) % s.tp_size:
        raise ConfigError(
            f"servers.tp_size: {len(s.gpu_list)} GPUs do not split into groups of {s.tp_size}"
        )
    if not 1 <= s.base_port <= 65535:
        raise ConfigError(f"servers.base_port: must be a TCP port, got {s.base_port}")
    if not s.model_path:
        raise ConfigError("servers.model_path: required (the model SGLang loads)")
    for key in ("model-path", "host", "port"):
        if key in s.flags:
            raise ConfigError(
                f"servers.flags.{key}: set by the supervisor (use servers.model_path / host / base_port)"
            )
    for name in ("startup_timeout_s", "health_interval_s", "health_timeout_s", "hang_timeout_s",
                 "stop_grace_s", "drain_timeout_s", "backoff_initial_s", "backoff_max_s",
                 "failure_window_s"):
        positive(f"servers.{name}", getattr(s, name))
    positive("servers.health_failures", s.health_failures)
    positive("servers.max_failures", s.max_failures)
    _check_ports(s)
    _check_context_length(cfg)
    mrr = s.flags.get("max-running-requests")
    if mrr is not None and (isinstance(mrr, bool) or not isinstance(mrr, int) or mrr < 1):
        raise ConfigError(f"servers.flags.max-running-requests: must be an integer >= 1, got {mrr!r}")
    _check_model_name(cfg)
    _check_thinking_parser(cfg)
    d = cfg.dispatch
    if d.max_in_flight_per_server < 0:
        raise ConfigError("dispatch.max_in_flight_per_server: must be >= 0 (0 = follow the server)")
    positive("dispatch.request_timeout_s", d.request_timeout_s)
    positive("dispatch.max_attempts", d.max_attempts)
    positive("dispatch.claim_batch", d.claim_batch)
    if d.stop_grace_s < 0:
        raise ConfigError("dispatch.stop_grace_s: must be >= 0 (0 = requeue at once)")
    if not 0 < d.breaker_error_rate <= 1:
        raise ConfigError(f"dispatch.breaker_error_rate: must be within (0, 1] (1 = never pause), "
                          f"got {d.breaker_error_rate}")
    positive("dispatch.breaker_window", d.breaker_window)
    positive("dispatch.stall_s", d.stall_s)
    positive("dispatch.stall_hang_window_s", d.stall_hang_window_s)
    if d.stall_hang_count < 0:
        raise ConfigError(f"dispatch.stall_hang_count: must be >= 0 (0 = never), "
                          f"got {d.stall_hang_count}")
    positive("dispatch.saturation_floor", d.saturation_floor)
    positive("dispatch.saturation_calm_s", d.saturation_calm_s)
    if not 0 <= d.saturation_collapse_ratio < 1:
        raise ConfigError(f"dispatch.saturation_collapse_ratio: must be within [0, 1) (0 = off), "
                          f"got {d.saturation_collapse_ratio}")
    if not 0 < d.breaker_min_samples <= d.breaker_window:
        raise ConfigError(f"dispatch.breaker_min_samples: must be within 1..dispatch."
                          f"breaker_window ({d.breaker_window}), got {d.breaker_min_samples}")
    q = cfg.quality
    positive("quality.window", q.window)
    if not 0 < q.min_samples <= q.window:
        raise ConfigError(f"quality.min_samples: must be within 1..quality.window ({q.window})")
    for name in ("max_bad_rate", "max_truncation_rate", "max_loop_rate",
                 "max_thinking_truncated_rate"):
        value = getattr(q, name)
        if not 0 < value <= 1:
            raise ConfigError(f"quality.{name}: must be within (0, 1], got {value}")
    positive("quality.metrics_window_s", q.metrics_window_s)
    positive("control.interval_s", cfg.control.interval_s)
    u = cfg.uploads
    positive("uploads.concurrency", u.concurrency)
    if u.multipart_threshold_bytes < 5 * 1024 * 1024:
        raise ConfigError("uploads.multipart_threshold_bytes: S3 parts are at least 5 MiB")
    if u.multipart_part_bytes < 5 * 1024 * 1024:
        raise ConfigError("uploads.multipart_part_bytes: S3 parts are at least 5 MiB")
    for name in ("timeout_s", "retry_initial_s", "retry_max_s", "drain_timeout_s"):
        positive(f"uploads.{name}", getattr(u, name))
    if u.retry_max_s < u.retry_initial_s:
        raise ConfigError("uploads.retry_max_s: must be >= uploads.retry_initial_s")
    if u.min_free_bytes < 0:
        raise ConfigError("uploads.min_free_bytes: must be >= 0")
    if not cfg.backup.interval_s >= 0:
        raise ConfigError(f"backup.interval_s: must be >= 0 (0 = only at start and stop), "
                          f"got {cfg.backup.interval_s}")
    out = cfg.job.output
    if out.startswith("s3://"):
        bucket = out[len("s3://"):].split("/", 1)[0]
        if not bucket:
            raise ConfigError(f"job.output: no bucket in {out!r} (expected s3://bucket/prefix/)")
    elif "://" in out:
        raise ConfigError(f"job.output: a local directory or s3://bucket/prefix/, got {out!r}")


def _check_ports(s: ServersSection) -> None:
    """Server i listens on base_port + i; SGLang flags that name a port of their own must
    not land in that range, and a fixed one cannot serve several servers (each would bind it)."""
    n_servers = len(s.gpu_list) // s.tp_size
    first, last = s.base_port, s.base_port + n_servers - 1
    if last > 65535:
        raise ConfigError(f"servers.base_port: {n_servers} servers need ports {first}..{last}, "
                          "past 65535")
    for name, value in s.flags.items():
        if not name.endswith("port") or isinstance(value, bool) or not isinstance(value, int):
            continue
        if not 1 <= value <= 65535:
            raise ConfigError(f"servers.flags.{name}: must be a TCP port (1..65535), got {value}")
        if first <= value <= last:
            raise ConfigError(f"servers.flags.{name}: port {value} overlaps the servers' ports "
                              f"{first}..{last} (servers.base_port)")
        if n_servers > 1:
            raise ConfigError(f"servers.flags.{name}: every one of the {n_servers} servers would "
                              f"bind port {value}; leave it unset so SGLang picks one per server")


def _check_context_length(cfg: JobConfig) -> None:
    # SGLang answers 400 to a request whose prompt + max_tokens reaches the context length:
    # with max_tokens alone at or past it, every prompt would fail.
    ctx = cfg.servers.context_length
    if ctx is not None and cfg.generation.max_tokens >= ctx:
        raise ConfigError(f"generation.max_tokens: {cfg.generation.max_tokens} is at or past the "
                          f"servers' context-length {ctx}; SGLang would refuse every request "
                          "(leave room for the prompt)")


def _check_model_name(cfg: JobConfig) -> None:
    # SGLang reads a request's "model" as "base-model:adapter-name" and serves the part after
    # the colon as a LoRA adapter, unless the whole name is the served model name
    # (`sglang/srt/entrypoints/openai/serving_base.py`, _parse_model_parameter). With no such
    # adapter every request is a 400: the whole job failing in minutes, not a per-prompt error.
    model = cfg.job.model
    if ":" not in model:
        return
    served = cfg.servers.flags.get("served-model-name") or cfg.servers.model_path
    if model == served:
        return
    raise ConfigError(f"job.model: {model!r} contains ':', which SGLang reads as "
                      "model:LoRA-adapter; use a name without ':' (the model is chosen by "
                      "servers.model_path; job.model only labels requests)")


# Refused rather than warned: without a reasoning parser SGLang (0.5.23) answers with the
# thinking inside `content`, <think> tags and all, and `reasoning_content` empty. Every
# answer is then "bad" in a way a day-long job only shows at the end (or, paused by the
# quality gate, after the first window) -- an operator would rather be stopped at start
# than find 900K answers with their thinking in the wrong field.
def _check_thinking_parser(cfg: JobConfig) -> None:
    if not cfg.generation.enable_thinking:
        return
    parser = cfg.servers.flags.get("reasoning-parser")
    if parser is None or parser is False or parser == "":
        raise ConfigError(
            "generation.enable_thinking = true needs servers.flags.reasoning-parser (e.g. "
            "reasoning-parser = \"qwen3\", the model's parser): without it SGLang returns the "
            "thinking inside content with its <think> tags; set it, or set "
            "generation.enable_thinking = false")


# SGLang picks each server's NCCL port below the kernel's ephemeral range, from 22000..29999
# (`sglang/srt/utils/network.py` get_free_port_below_ephemeral, called by PortArgs.init_new in
# `sglang/srt/server_args.py` when --nccl-port is not given).
NCCL_PORTS = (22000, 29999)


def load_warnings(cfg: JobConfig) -> list[str]:
    """What loads but may bite: one line each, logged at load and printed by `check`."""
    out = []
    s = cfg.servers
    first, last = s.base_port, s.base_port + len(s.gpu_list) // s.tp_size - 1
    low, high = NCCL_PORTS
    if first <= high and last >= low:
        # A warning, not a refusal: SGLang takes a port only if it is free when it looks, so
        # this is a chance, not a certainty -- but when a starting server finds its HTTP port
        # taken by another server's NCCL store it fails, and nothing restarts it out of that.
        out.append(f"servers.base_port: the servers' ports {first}..{last} fall inside "
                   f"{low}..{high}, where SGLang picks its NCCL ports; a server can find its "
                   f"port taken by another's NCCL store (use base_port >= {high + 1}, e.g. 30000)")
    return out


def check_gpus_exist(cfg: JobConfig, device_count: int | None) -> None:
    """Refuse GPU indices the node does not have, when the driver can say how many it has
    (`device_count` None: no driver here, nothing to check). The simulator needs no GPU."""
    if device_count is None or any("supervisor.sim" in part for part in cfg.servers.command):
        return
    missing = [g for g in cfg.servers.gpu_list if g >= device_count]
    if missing:
        key = "servers.gpus" if cfg.servers.gpus else "servers.count"
        raise ConfigError(f"{key}: GPU {', '.join(map(str, missing))} does not exist "
                          f"(this node has {device_count}: 0..{device_count - 1})")


def _resolve_auto_partition(job: JobSection, env: Mapping[str, str]) -> JobSection:
    from supervisor.partition_env import PartitionEnvError, resolve

    if job.partition_count < 0:
        raise ConfigError(f"job.partition_count: must be >= 0, got {job.partition_count}")
    if job.partition != "auto":  # type: ignore[comparison-overlap]
        return job
    try:
        found = resolve(env, job.partition_count)
    except PartitionEnvError as exc:
        raise ConfigError(f"job.partition = \"auto\": {exc}") from None
    return replace(job, partition=Partition(found.index, found.count))


def parse_config(data: Mapping[str, Any], base_dir: Path = Path("."),
                 env: Mapping[str, str] | None = None) -> JobConfig:
    """`env` is where `job.partition = "auto"` looks (the process environment by default)."""
    sections: dict[str, Any] = {}
    for name, raw in data.items():
        cls = _SECTIONS.get(name)
        if cls is None:
            allowed = ", ".join(f"[{n}]" for n in _SECTIONS)
            raise ConfigError(f"[{name}]: unknown section (allowed: {allowed})")
        sections[name] = _build_section(name, cls, raw)
    sections["job"] = _resolve_auto_partition(sections.get("job", JobSection()),
                                              os.environ if env is None else env)
    cfg = JobConfig(**sections, base_dir=base_dir)
    _validate(cfg)
    return cfg


def load_config(path: str | Path, workdir: str | Path | None = None) -> JobConfig:
    """`workdir` replaces the config file's directory as the base of relative paths: one
    config shared by many nodes, each with its own state, spool and logs."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    base = Path(workdir).expanduser().resolve() if workdir is not None else path.resolve().parent
    cfg = parse_config(data, base_dir=base)
    for line in load_warnings(cfg):
        logging.getLogger("supervisor.config").warning("%s: %s", path, line)
    return cfg


def with_flags(cfg: JobConfig, flags: Mapping[str, Any]) -> JobConfig:
    """A copy with server flags merged in (retune); a value of None removes a flag."""
    merged = dict(cfg.servers.flags)
    for key, value in _check_flags("servers.flags", dict(flags)).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    new = replace(cfg, servers=replace(cfg.servers, flags=merged))
    _validate(new)
    return new
