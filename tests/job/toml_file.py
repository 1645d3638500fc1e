"""A job config written as a real TOML file (what `systemctl reload` re-reads), from the same
settings tests/servers/real_job.py uses for in-process jobs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from supervisor.demo.prompts import write_demo_prompts
from supervisor.free_ports import free_base_port
from tests.servers.real_job import FAST_SERVERS, MAX_TOKENS, SIM_FLAGS, SLOTS


def job_data(directory: Path, *, servers: int, prompts: int, base_port: int | None = None,
             flags: dict[str, Any] | None = None) -> dict[str, Any]:
    prompts_file = directory / "prompts.jsonl"
    if not prompts_file.exists():
        write_demo_prompts(prompts_file, prompts)
    return {
        "job": {"prompts": str(prompts_file), "state": "job.db", "output": "shards",
                "shard_size": 50, "model": "sim"},
        "generation": {"max_tokens": MAX_TOKENS, "enable_thinking": False},
        "servers": {"count": servers, "base_port": base_port or free_base_port(servers),
                    "model_path": "sim/test-model",
                    "command": [sys.executable, "-m", "supervisor.sim"], **FAST_SERVERS,
                    "flags": {"max-running-requests": SLOTS, **SIM_FLAGS, **(flags or {})}},
        "control": {"socket": str(directory / "control.sock")},
    }


def write_toml(path: Path, data: dict[str, Any]) -> Path:
    """Tables of scalars and lists, nested tables after a table's own keys."""
    lines: list[str] = []

    def table(name: str, values: dict[str, Any]) -> None:
        lines.append(f"[{name}]")
        subs = {k: v for k, v in values.items() if isinstance(v, dict)}
        for key, value in values.items():
            if key not in subs:
                # JSON's strings, numbers, booleans and arrays are TOML's too.
                lines.append(f'"{key}" = {json.dumps(value)}')
        for key, value in subs.items():
            table(f"{name}.{key}", value)

    for name, values in data.items():
        table(name, values)
    path.write_text("\n".join(lines) + "\n")
    return path
