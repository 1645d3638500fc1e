"""The checks across keys and sections once the config is built (ranges, ports, the context
length, the model name, the thinking parser), the warnings that load but may bite, and the
GPUs the node really has."""

from __future__ import annotations

from collections.abc import Mapping

from supervisor.config.attach_urls import attach_targets
from supervisor.config.host_names import host_problem
from supervisor.config.listen_address import parse_listen
from supervisor.config.sections import ConfigError, JobConfig, ServersSection

# SGLang 0.5.23's /health_generate waits up to this long for its scheduler to make progress
# before it answers 503 (`sglang/srt/entrypoints/http_server.py:218` HEALTH_CHECK_TIMEOUT,
# SGLANG_HEALTH_CHECK_TIMEOUT; the wait loop polls each second, :779).
SGLANG_HEALTH_WAIT_S = 20.0
# job.keep_token_ids: the answers whose exact ids the state DB keeps.
KEEP_TOKEN_IDS = ("truncated", "all")


def validate(cfg: JobConfig) -> None:
    def positive(key: str, value: float) -> None:
        if value <= 0:
            raise ConfigError(f"{key}: must be > 0, got {value}")

    positive("job.shard_size", cfg.job.shard_size)
    if cfg.job.keep_token_ids not in KEEP_TOKEN_IDS:
        raise ConfigError(f"job.keep_token_ids: must be \"truncated\" or \"all\", got "
                          f"{cfg.job.keep_token_ids!r}")
    if cfg.job.shard_output_ids and cfg.job.keep_token_ids != "all":
        raise ConfigError("job.shard_output_ids: needs job.keep_token_ids = \"all\" (only "
                          "then are the ids of answers that end \"stop\" kept)")
    positive("generation.max_tokens", cfg.generation.max_tokens)
    if not 0 <= cfg.generation.temperature <= 2:
        raise ConfigError(f"generation.temperature: must be within 0..2, got {cfg.generation.temperature}")
    if not 0 < cfg.generation.top_p <= 1:
        raise ConfigError(f"generation.top_p: must be within (0, 1], got {cfg.generation.top_p}")
    s = cfg.servers
    if s.gpus and s.count:
        raise ConfigError("servers: set either gpus or count, not both")
    negative = [g for g in s.gpus if g < 0]
    if negative:
        raise ConfigError(f"servers.gpus: GPU ids are 0 or more, got {negative[0]} in "
                          f"{list(s.gpus)}")
    if s.count < 0:
        raise ConfigError(f"servers.count: must be >= 1, got {s.count}")
    attach_targets(s.attach)
    if not s.gpu_list and not s.attach:
        raise ConfigError("servers: set gpus = [0, 1, ...] or count = N (N >= 1), or attach = "
                          "[\"http://host:port\", ...] (servers the daemon did not launch)")
    if len(set(s.gpu_list)) != len(s.gpu_list):
        raise ConfigError(f"servers.gpus: a GPU is listed twice: {list(s.gpu_list)}")
    positive("servers.tp_size", s.tp_size)
    if len(s.gpu_list) % s.tp_size:
        raise ConfigError(
            f"servers.tp_size: {len(s.gpu_list)} GPUs do not split into groups of {s.tp_size}"
        )
    problem = host_problem(s.host)
    if problem:
        raise ConfigError(f"servers.host: {problem}")
    if not 1 <= s.base_port <= 65535:
        raise ConfigError(f"servers.base_port: must be a TCP port, got {s.base_port}")
    if not s.model_path and s.own_servers:
        raise ConfigError("servers.model_path: required (the model SGLang loads)")
    for key in ("model-path", "host", "port"):
        if key in s.flags:
            raise ConfigError(
                f"servers.flags.{key}: set by the supervisor (use servers.model_path / host / base_port)"
            )
    for name in ("startup_timeout_s", "health_interval_s", "health_timeout_s", "hang_timeout_s",
                 "stop_grace_s", "drain_timeout_s", "backoff_initial_s", "backoff_max_s",
                 "failure_window_s", "served_after_s"):
        positive(f"servers.{name}", getattr(s, name))
    for name in ("max_unserved_failures", "max_brief_failures"):
        if getattr(s, name) < 0:
            raise ConfigError(f"servers.{name}: must be >= 0 (0 = never), "
                              f"got {getattr(s, name)}")
    positive("servers.health_failures", s.health_failures)
    if s.launcher not in ("auto", "process", "systemd"):
        raise ConfigError(f"servers.launcher: must be \"auto\", \"process\" or \"systemd\", "
                          f"got {s.launcher!r}")
    positive("servers.max_failures", s.max_failures)
    _check_ports(s)
    _check_attach_ports(s)
    _check_context_length(cfg)
    mrr = s.flags.get("max-running-requests")
    if mrr is not None and (isinstance(mrr, bool) or not isinstance(mrr, int) or mrr < 1):
        raise ConfigError(f"servers.flags.max-running-requests: must be an integer >= 1, got {mrr!r}")
    _check_model_name(cfg)
    _check_thinking_parser(cfg)
    _check_tune(cfg)
    d = cfg.dispatch
    if d.max_in_flight_per_server < 0:
        raise ConfigError("dispatch.max_in_flight_per_server: must be >= 0 (0 = follow the server)")
    if isinstance(d.queue_ahead, bool) or not isinstance(d.queue_ahead, int) \
            or d.queue_ahead < 0:
        raise ConfigError(f"dispatch.queue_ahead: must be an integer >= 0 (0 = none), "
                          f"got {d.queue_ahead!r}")
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
    if not d.wait_s >= d.stall_s:
        raise ConfigError(f"dispatch.wait_s: must be at least dispatch.stall_s "
                          f"({d.stall_s:g}), got {d.wait_s}")
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
    if cfg.control.metrics_listen:
        parse_listen(cfg.control.metrics_listen)
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


# Names and addresses by which an attached URL can mean this node.
_THIS_NODE = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::"}


def _check_attach_ports(s: ServersSection) -> None:
    """An attached URL on this node inside the own servers' port range would be one of our
    own servers fed twice (and stopped by us)."""
    n_servers = len(s.gpu_list) // s.tp_size
    if not n_servers:
        return
    first, last = s.base_port, s.base_port + n_servers - 1
    for i, t in enumerate(attach_targets(s.attach)):
        if first <= t.port <= last and t.host.lower() in _THIS_NODE | {s.host}:
            raise ConfigError(f"servers.attach[{i}]: {t.url} is one of the daemon's own servers' "
                              f"ports {first}..{last} (servers.base_port); attach only servers "
                              "it does not launch")


def _check_tune(cfg: JobConfig) -> None:
    t = cfg.tune
    for name in ("max_trials", "min_window_s", "max_window_s", "min_answers", "noise_k",
                 "sample_s"):
        if getattr(t, name) <= 0:
            raise ConfigError(f"tune.{name}: must be > 0, got {getattr(t, name)}")
    if t.max_window_s < t.min_window_s:
        raise ConfigError(f"tune.max_window_s: must be >= tune.min_window_s "
                          f"({t.min_window_s:g}), got {t.max_window_s:g}")
    for name, values in t.space.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"tune.space.{name}: expected a non-empty list of values to try, "
                              f"got {values!r}")


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
#
# Only the daemon's own servers take `[servers.flags]`: an attached server's parser is read
# from its /server_info at start (supervisor/job/attached_thinking.py).
def _check_thinking_parser(cfg: JobConfig) -> None:
    if not cfg.generation.enable_thinking or not cfg.servers.own_servers:
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
    simulated = any("supervisor.sim" in part for part in s.command)
    if not simulated and s.health_timeout_s <= SGLANG_HEALTH_WAIT_S + 1:
        # A warning, not a refusal: a short probe works on an idle server. On a loaded one
        # SGLang may take its whole 20 s to answer 200, and our probe gives up first.
        out.append(f"servers.health_timeout_s: {s.health_timeout_s:g} s is not above "
                   f"SGLang's own {SGLANG_HEALTH_WAIT_S:g} s wait in /health_generate; a "
                   f"loaded server that still makes progress can fail the probe (default 30)")
    if s.flags.get("enable-metrics", True) in (False, None):
        out.append("servers.flags.enable-metrics = false: SGLang's /metrics are off, so "
                   "over-commit, saturation and waiting detection are blind")
    return out


def check_gpus_exist(cfg: JobConfig, device_count: int | None,
                     env: Mapping[str, str] | None = None) -> None:
    """Refuse GPU indices the job does not have. Where the daemon's own CUDA_VISIBLE_DEVICES
    is set (a scheduler's allocation, read from `env`, the process environment by default),
    the config's numbers index into that list and must be within it; else, where the driver
    can say how many GPUs the node has (`device_count` None: no driver, nothing to check),
    within those. The simulator needs no GPU."""
    from supervisor.gpu.visible_devices import describe, visible_devices

    if any("supervisor.sim" in part for part in cfg.servers.command):
        return
    key = "servers.gpus" if cfg.servers.gpus else "servers.count"
    visible = visible_devices(env)
    if visible is not None:
        past = [g for g in cfg.servers.gpu_list if g >= len(visible)]
        if past:
            raise ConfigError(f"{key}: GPU {', '.join(map(str, past))} is past {describe(visible)}; "
                              "under a scheduler the config's GPUs are indices into its list")
        return
    if device_count is None:
        return
    missing = [g for g in cfg.servers.gpu_list if g >= device_count]
    if missing:
        raise ConfigError(f"{key}: GPU {', '.join(map(str, missing))} does not exist "
                          f"(this node has {device_count}: 0..{device_count - 1})")
