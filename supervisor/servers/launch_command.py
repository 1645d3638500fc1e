"""The exact command, environment and port of each server, built from the config.

The argv is always a list (never a shell string) and flags are passed through from config
rather than hard-coded, because SGLang renames flags between releases.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from supervisor.config import DispatchSection, ServersSection
from supervisor.gpu.visible_devices import devices_for, visible_devices
from supervisor.sglang.metrics import ENABLE_METRICS

# The dispatcher's per-server in-flight limit when neither config nor flags say and the
# server does not report its own on /server_info (see server_slots.py).
DEFAULT_MAX_RUNNING = 32

# Tokens per streamed chunk when the job's flags do not set --stream-interval. SGLang's
# default is 1, a chunk per decode step (`sglang/srt/arg_groups/fields/serving.py`
# stream_interval; the OpenAI route takes no per-request value): the daemon spends ~57 us
# on each (benchmarks/README.md), and a node's 8 x 256 requests at ~50 tok/s would send
# ~100,000 a second, several cores of it. 16 tokens a chunk still shows a stalled request
# within a fraction of a second and a loop within 16 tokens.
DEFAULT_STREAM_INTERVAL = 16

# systemd hands these to the daemon; a child that inherits NOTIFY_SOCKET could send READY or
# WATCHDOG on our behalf (SGLang does not, but a library might) and confuse the service state.
_SYSTEMD_VARS = ("NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC")


@dataclass(frozen=True)
class ServerSpec:
    """One server: which GPUs it owns, where it listens, and how it is launched."""

    name: str
    gpus: tuple[int, ...]
    port: int
    host: str
    argv: tuple[str, ...]

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(str(g) for g in self.gpus)

    @property
    def base_url(self) -> str:
        # An IPv6 address goes in brackets in a URL (RFC 3986), "http://[::1]:30000".
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def server_name(gpus: tuple[int, ...]) -> str:
    """"gpu3" for one GPU, "gpu0-1" for a tensor-parallel group of GPUs 0 and 1."""
    return "gpu" + "-".join(str(g) for g in gpus)


def gpu_groups(servers: ServersSection) -> list[tuple[int, ...]]:
    gpus = servers.gpu_list
    n = servers.tp_size
    return [tuple(gpus[i:i + n]) for i in range(0, len(gpus), n)]


def flag_args(flags: Mapping[str, Any]) -> list[str]:
    """`name = value` → --name value; true → --name; false/None → omitted; list → --name a b."""
    out: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        if value is True:
            out.append(f"--{name}")
        elif isinstance(value, (list, tuple)):
            out.append(f"--{name}")
            out.extend(_scalar(v) for v in value)
        else:
            out.extend((f"--{name}", _scalar(value)))
    return out


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        # Inside a list a boolean has no flag to toggle; SGLang's argparse expects words.
        return "true" if value else "false"
    return str(value)


def build_argv(servers: ServersSection, port: int) -> list[str]:
    argv = [*servers.command, "--model-path", servers.model_path,
            "--host", servers.host, "--port", str(port)]
    if servers.tp_size > 1:
        argv += ["--tp-size", str(servers.tp_size)]
    if "stream-interval" not in servers.flags:       # the job's own value wins, 1 included
        argv += ["--stream-interval", str(DEFAULT_STREAM_INTERVAL)]
    # SGLang's /metrics (off by default in SGLang) is what the over-commit flag, the saturation
    # guard and the waiting-vs-stuck judgement read (sglang_monitor.py): the daemon asks for
    # it unless the job's flags say `enable-metrics = false`, and then says they are blind.
    if ENABLE_METRICS not in servers.flags:
        argv.append(f"--{ENABLE_METRICS}")
    return argv + flag_args(servers.flags)


def metrics_off(servers: ServersSection) -> bool:
    """The job's flags switch SGLang's /metrics off (the daemon's default is on)."""
    value = servers.flags.get(ENABLE_METRICS, True)
    return value is None or value is False


def build_specs(servers: ServersSection) -> list[ServerSpec]:
    specs = []
    for i, gpus in enumerate(gpu_groups(servers)):
        port = servers.base_port + i
        specs.append(ServerSpec(server_name(gpus), gpus, port, servers.host,
                                tuple(build_argv(servers, port))))
    return specs


def server_devices(spec: ServerSpec, base: Mapping[str, str] | None = None) -> str:
    """The server's CUDA_VISIBLE_DEVICES: its GPUs' entries in the daemon's own list where a
    scheduler set one (supervisor/gpu/visible_devices.py), else the config's GPU numbers."""
    visible = visible_devices(base)
    try:
        return ",".join(devices_for(spec.gpus, visible))
    except IndexError:
        # Only the simulator gets here (it uses no GPU; the start refuses such an index for
        # any other command): its numbers as they are.
        return spec.cuda_visible_devices


def build_env(spec: ServerSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    for key in _SYSTEMD_VARS:
        env.pop(key, None)
    # Read before it is overwritten: a scheduler's list is what the server's GPUs index into.
    env["CUDA_VISIBLE_DEVICES"] = server_devices(spec, env)
    # The exit classifier reads a death from the last lines; a block-buffered stdout would lose
    # exactly those lines when the process is killed.
    env["PYTHONUNBUFFERED"] = "1"
    return env


def max_running(servers: ServersSection, dispatch: DispatchSection) -> int | None:
    """The dispatcher's in-flight limit for a server launched with these flags; None when
    only the server can say (no --max-running-requests: SGLang sizes it from the KV pool)."""
    if dispatch.max_in_flight_per_server > 0:
        return dispatch.max_in_flight_per_server
    return servers.max_running_requests()
