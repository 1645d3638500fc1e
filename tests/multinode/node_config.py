"""One "node" of a many-node job on this machine: a job config on simulated servers (instant
answers), written as TOML the way an operator writes one for a cluster."""

from __future__ import annotations

import sys
from pathlib import Path

from supervisor.free_ports import free_base_port


def _q(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def node_config(path: Path, *, prompts: Path, output: str, partition: str = "auto",
                endpoint_url: str | None = None, servers: int = 1, shard_size: int = 40,
                backup_interval_s: float = 2.0, slots: int = 8,
                sim_flags: dict[str, str] | None = None) -> Path:
    """State, spool, logs and the socket stay relative: with `run --workdir` they land in
    the node's own directory, as on a cluster."""
    flags = {"max-running-requests": str(slots), "context-length": "32768",
             "reasoning-parser": '"qwen3"', "sim-instant": "true", "sim-startup-s": "0.2",
             **(sim_flags or {})}
    lines = [
        "[job]", f"prompts = {_q(str(prompts))}", 'state = "job.db"', f"output = {_q(output)}",
        f"shard_size = {shard_size}", 'model = "sim-model"', f"partition = {_q(partition)}", "",
        "[servers]", f"count = {servers}", f"base_port = {free_base_port(servers)}",
        'model_path = "sim/test-model"', f"command = [{_q(sys.executable)}, \"-m\", \"supervisor.sim\"]",
        'log_dir = "logs"', "startup_timeout_s = 60", "health_interval_s = 0.5",
        "stop_grace_s = 5", "drain_timeout_s = 10", "backoff_initial_s = 0.5", "",
        "[servers.flags]", *(f"{k} = {v}" for k, v in flags.items()), "",
        # A short graceful-stop grace: slow simulated requests would hold a SIGTERM for the
        # default 120 s.
        "[dispatch]", "stop_grace_s = 5", "",
        "[uploads]", 'spool_dir = "spool"', "min_free_bytes = 0", "timeout_s = 10",
        "retry_initial_s = 0.2", "retry_max_s = 2", "drain_timeout_s = 60",
        *([f"endpoint_url = {_q(endpoint_url)}"] if endpoint_url else []), "",
        "[backup]", f"interval_s = {backup_interval_s}", "",
        "[control]", 'socket = "control.sock"', "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path
