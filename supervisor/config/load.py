"""A config from TOML (a file, or a mapping already read): sections built, the partition
resolved, checked; and a config with other server flags (a live retune)."""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from supervisor.config.checks import load_warnings, validate
from supervisor.config.coerce import build_section, coerce_flags, owners_of
from supervisor.config.listen_address import listen_from_env
from supervisor.config.sections import (
    SECTIONS,
    ConfigError,
    ControlSection,
    JobConfig,
    JobSection,
    Partition,
)


def _resolve_auto_partition(job: JobSection, env: Mapping[str, str]) -> JobSection:
    from supervisor.config.partition_env import PartitionEnvError, resolve

    if job.partition_count < 0:
        raise ConfigError(f"job.partition_count: must be >= 0, got {job.partition_count}")
    if job.partition != "auto":  # type: ignore[comparison-overlap]
        return job
    try:
        found = resolve(env, job.partition_count)
    except PartitionEnvError as exc:
        raise ConfigError(f"job.partition = \"auto\": {exc}") from None
    return replace(job, partition=Partition(found.index, found.count))


def _unknown_top_level(name: str, raw: Any) -> str:
    allowed = ", ".join(f"[{n}]" for n in SECTIONS)
    if isinstance(raw, dict):
        return f"[{name}]: unknown section (allowed: {allowed})"
    # A plain key at the top level: TOML puts a key written above the first [table] header
    # outside every table, so `prompts = "p.jsonl"` on line 1 is not job.prompts.
    owners = owners_of(name, SECTIONS)
    if owners:
        where = " or ".join(f"[{o}] ({o}.{name})" for o in owners)
        return (f"{name}: a key at the top of the file, outside any table; it belongs in "
                f"{where}: move it under that table's header")
    return (f"{name}: a key at the top of the file, outside any table, and no table has it "
            f"(tables: {allowed})")


def _check_gpu_keys(raw: Any) -> None:
    """What the built section cannot tell apart: `gpus = []` written out (with a count, or
    alone) looks like gpus left unset."""
    if not isinstance(raw, dict) or "gpus" not in raw:
        return
    if "count" in raw:
        raise ConfigError(f"servers: set either gpus or count, not both (gpus = {raw['gpus']!r}, "
                          f"count = {raw['count']!r})")
    if raw["gpus"] == [] and not raw.get("attach"):
        raise ConfigError("servers.gpus: an empty list; list the GPUs (gpus = [0, 1, ...]) "
                          "or set count = N, or attach servers (attach = [\"http://host:port\"])")


def parse_config(data: Mapping[str, Any], base_dir: Path = Path("."),
                 env: Mapping[str, str] | None = None) -> JobConfig:
    """`env` is where `job.partition = "auto"` and an unset control.metrics_listen look (the
    process environment by default)."""
    sections: dict[str, Any] = {}
    for name, raw in data.items():
        cls = SECTIONS.get(name)
        if cls is None:
            raise ConfigError(_unknown_top_level(name, raw))
        sections[name] = build_section(name, cls, raw, SECTIONS)
    _check_gpu_keys(data.get("servers"))
    env = os.environ if env is None else env
    sections["job"] = _resolve_auto_partition(sections.get("job", JobSection()), env)
    sections["control"] = listen_from_env(sections.get("control", ControlSection()), env)
    cfg = JobConfig(**sections, base_dir=base_dir)
    validate(cfg)
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
    for key, value in coerce_flags("servers.flags", dict(flags)).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    new = replace(cfg, servers=replace(cfg.servers, flags=merged))
    validate(new)
    return new

