"""A real job's TOML file on disk (for the CLI: `run`, `rebuild-state`), with the same quick
settings as tests/servers/real_job.py's in-process configs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from supervisor.free_ports import free_base_port
from supervisor.demo.prompts import write_demo_prompts
from tests.servers.real_job import FAST_SERVERS, MAX_TOKENS, SIM_FLAGS, SLOTS


def _value(v: Any) -> str:
    # JSON's strings, numbers, booleans and lists of them are valid TOML values.
    return json.dumps(v)


def write_job_toml(directory: Path, *, servers: int, prompts: int,
                   flags: dict[str, Any] | None = None, job: dict[str, Any] | None = None,
                   uploads: dict[str, Any] | None = None, **server_keys: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "prompts.jsonl").exists():
        write_demo_prompts(directory / "prompts.jsonl", prompts)
    sections: dict[str, dict[str, Any]] = {
        "job": {"prompts": "prompts.jsonl", "state": "job.db", "output": "shards",
                "shard_size": 50, "model": "sim", **(job or {})},
        "generation": {"max_tokens": MAX_TOKENS, "enable_thinking": False},
        "servers": {"count": servers, "base_port": free_base_port(servers),
                    "model_path": "sim/test-model",
                    "command": [sys.executable, "-m", "supervisor.sim"],
                    **FAST_SERVERS, **server_keys},
        "servers.flags": {"max-running-requests": SLOTS, **SIM_FLAGS, **(flags or {})},
        "control": {"socket": str(directory / "control.sock")},
        "uploads": dict(uploads or {}),
    }
    text = "".join(f"[{name}]\n" + "".join(f"{k} = {_value(v)}\n" for k, v in body.items())
                   + "\n" for name, body in sections.items())
    path = directory / "job.toml"
    path.write_text(text)
    return path
