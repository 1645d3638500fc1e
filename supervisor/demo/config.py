"""The demo's job config: simulated servers on loopback with a day's shape squeezed into a
minute, written out as TOML so `dflash-supervisor run --config` runs the same job."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from supervisor.config import JobConfig, parse_config
from supervisor.config.toml_text import toml_value

# Simulated timing: a day's shape in about a minute. Each slot decodes at
# tokens_per_s × time_scale tokens per wall second; with 3 servers × 32 slots and ~2,000
# output tokens on average, 3,000 prompts take about a minute.
DEMO_TOKENS_PER_S = 60
DEMO_TIME_SCALE = 20.0
DEMO_SLOTS = 32
# A demo's S3 settings: its ~6 MB shards cross S3's smallest multipart size, so both kinds of
# upload show; short timeouts and backoff so a stopped store is noticed, and recovered from,
# within the demo's minute.
DEMO_S3: dict[str, Any] = {"multipart_threshold_bytes": 5 * 1024 * 1024,
                           "multipart_part_bytes": 5 * 1024 * 1024, "timeout_s": 10.0,
                           "retry_initial_s": 0.5, "retry_max_s": 4.0, "drain_timeout_s": 120.0}


def demo_config(directory: Path, *, servers: int, prompts_file: Path, output: str,
                max_tokens: int, sim_flags: dict[str, Any], endpoint_url: str | None,
                base_port: int) -> JobConfig:
    data: dict[str, Any] = {
        "job": {"prompts": str(prompts_file), "state": "job.db", "output": output,
                "shard_size": 500, "model": "demo-sim"},
        "generation": {"max_tokens": max_tokens},
        "servers": {
            "count": servers, "base_port": base_port, "model_path": "sim/demo-model",
            "command": [sys.executable, "-m", "supervisor.sim"],
            "log_dir": "logs", "startup_timeout_s": 60.0, "health_interval_s": 1.0,
            "health_timeout_s": 2.0, "hang_timeout_s": 20.0, "stop_grace_s": 5.0,
            "drain_timeout_s": 30.0, "backoff_initial_s": 0.5, "backoff_max_s": 10.0,
            "failure_window_s": 120.0,
            "flags": {"max-running-requests": DEMO_SLOTS, "context-length": 32768,
                      "reasoning-parser": "qwen3", "enable-metrics": True, **sim_flags},
        },
        "quality": {"window": 200, "min_samples": 50, "max_bad_rate": 0.5,
                    "metrics_window_s": 15.0},
        "uploads": {"spool_dir": "spool", "min_free_bytes": 64 * 1024 * 1024,
                    **({"endpoint_url": endpoint_url} if endpoint_url else {}),
                    **(DEMO_S3 if output.startswith("s3://") else {})},
        "control": {"socket": str(directory / "control.sock")},
    }
    return parse_config(data, base_dir=directory)


def write_config_file(path: Path, cfg: JobConfig) -> None:
    """The demo's config as TOML, so `dflash-supervisor run --config` can run it too."""
    s = cfg.servers
    lines = ["# Written by `dflash-supervisor demo`; runs with `dflash-supervisor run --config`.",
             "[job]", f"prompts = {toml_value(cfg.job.prompts)}",
             f"state = {toml_value(cfg.job.state)}", f"output = {toml_value(cfg.job.output)}",
             f"shard_size = {cfg.job.shard_size}", f"model = {toml_value(cfg.job.model)}", "",
             "[generation]", f"max_tokens = {cfg.generation.max_tokens}", "", "[servers]",
             f"count = {s.count}", f"base_port = {s.base_port}",
             f"model_path = {toml_value(s.model_path)}", f"command = {toml_value(s.command)}",
             f"startup_timeout_s = {s.startup_timeout_s}", f"hang_timeout_s = {s.hang_timeout_s}",
             f"backoff_initial_s = {s.backoff_initial_s}", f"backoff_max_s = {s.backoff_max_s}",
             "", "[servers.flags]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in s.flags.items()]
    u = cfg.uploads
    lines += ["", "[uploads]", f"spool_dir = {toml_value(u.spool_dir)}",
              f"min_free_bytes = {u.min_free_bytes}"]
    if u.endpoint_url:
        lines.append(f"endpoint_url = {toml_value(u.endpoint_url)}")
    if cfg.output_is_s3:
        lines += [f"{k} = {toml_value(getattr(u, k))}" for k in DEMO_S3]
    path.write_text("\n".join(lines) + "\n")
