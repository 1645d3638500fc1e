"""Starting a simulated server by hand, outside the daemon: the test fixtures and the
benchmarks both need one on loopback, and benchmarks may not import from tests/.

The daemon never uses this: it launches the simulator exactly as it launches SGLang
(servers/launch_command.py), through its own supervision.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx


def sim_argv(port: int, *flags: str, model_path: str = "sim/test-model") -> list[str]:
    """`python -m supervisor.sim` on 127.0.0.1:`port` with extra SGLang/--sim-* flags."""
    return [sys.executable, "-m", "supervisor.sim", "--model-path", model_path,
            "--host", "127.0.0.1", "--port", str(port), *flags]


def wait_healthy(base_url: str, proc: subprocess.Popen, timeout_s: float = 30.0,
                 poll_s: float = 0.05) -> None:
    """Until /health_generate answers 200 (the port refuses connections while "loading",
    then answers 503 in warmup, as SGLang does); RuntimeError if the process exits or
    `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"simulated server exited with {proc.returncode}")
            try:
                if client.get(base_url + "/health_generate", timeout=5.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(poll_s)
    raise RuntimeError(f"{base_url} not healthy within {timeout_s} s")


def kill_group(proc: subprocess.Popen, wait_s: float = 10.0) -> None:
    """SIGKILL the simulator's whole process group (it forks children, as SGLang does)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=wait_s)
