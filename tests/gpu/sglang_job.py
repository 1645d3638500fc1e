"""A whole job on real SGLang for the GPU test: the tiny model built in a child process, the
job's TOML, the daemon as a real process, and the daemon's own CLI (`status --json`, `ctl`)
to watch and steer it, as an operator's script would."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.demo.prompts import write_demo_prompts
from tests.fixtures import REPO
from tests.fixtures.job_toml import write_toml
from tests.fixtures.ports import free_base_port
from tests.gpu.tiny_qwen3 import TinyModel

SHARED_GPU = Path(__file__).with_name("shared_gpu.py")
MODEL_DIR = "tiny-think-model"        # named unlike any of SGLang's built-in templates

# SGLang 0.5.23 flags, each checked in its server args (sglang/srt/arg_groups/fields/ and
# sglang/srt/server_args.py). CUDA graphs off in both phases: capture would cost more than
# this test's whole generation. Sampling on the pytorch backend: flashinfer's sampling
# kernels are JIT-built on first use, which needs a compiler and time. max-total-tokens caps
# each server's KV pool: SGLang sizes the pool from the free memory it measured before
# loading (sglang/srt/mem_cache/kv_cache_configurator.py, _profile_available_bytes), so
# two servers starting together on one GPU would otherwise count each other's pool twice.
SGLANG_FLAGS: dict[str, Any] = {
    "mem-fraction-static": 0.3,
    "max-total-tokens": 65536,
    "max-running-requests": 8,
    "context-length": 2048,
    "reasoning-parser": "qwen3",
    "enable-metrics": True,
    "cuda-graph-backend-decode": "disabled",
    "cuda-graph-backend-prefill": "disabled",
    "sampling-backend": "pytorch",
}


def missing_for_gpu_test() -> str | None:
    """Why the GPU test cannot run here, or None. Cheap: nothing heavy is imported."""
    missing = [m for m in ("torch", "transformers", "tokenizers", "sglang")
               if importlib.util.find_spec(m) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (see tests/gpu/README.md)"
    from supervisor.gpu.nvml_source import node_gpu_count
    if not node_gpu_count():
        return "no NVIDIA GPU (NVML reports none)"
    return None


def build_model(directory: Path, timeout_s: float = 120.0) -> TinyModel:
    """Built in a child process: torch and transformers stay out of the test's process."""
    path = directory / MODEL_DIR
    out = subprocess.run([sys.executable, "-m", "tests.gpu.tiny_qwen3", str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=timeout_s,
                         stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise AssertionError(f"building the tiny model failed: {out.stderr[-3000:]}")
    return TinyModel.load(path)


def job_config(directory: Path, model_path: Path, *, prompts: int,
               max_tokens: int) -> dict[str, Any]:
    """Two servers, GPUs "0" and "1" (both the shared device), on the model at
    `model_path`, the demo prompts, local shards. Quick restarts; a load timeout that
    leaves SGLang minutes to import and start."""
    prompts_file = directory / "prompts.jsonl"
    write_demo_prompts(prompts_file, prompts)
    return {
        "job": {"prompts": str(prompts_file), "state": "job.db", "output": "shards",
                "shard_size": 100, "model": MODEL_DIR},
        "generation": {"max_tokens": max_tokens, "temperature": 0.6, "top_p": 0.95,
                       "enable_thinking": True},
        "servers": {
            "gpus": [0, 1], "base_port": free_base_port(2), "model_path": str(model_path),
            "command": [sys.executable, str(SHARED_GPU), "launch", "-m", "sglang.launch_server"],
            "startup_timeout_s": 300.0, "health_interval_s": 1.0, "health_timeout_s": 10.0,
            "hang_timeout_s": 120.0, "stop_grace_s": 20.0, "drain_timeout_s": 30.0,
            "backoff_initial_s": 1.0, "backoff_max_s": 5.0, "max_failures": 5,
            "failure_window_s": 600.0, "flags": dict(SGLANG_FLAGS)},
        "dispatch": {"request_timeout_s": 120.0},
        "control": {"socket": str(directory / "control.sock"), "interval_s": 0.5},
        "uploads": {},
    }


def cli_argv() -> list[str]:
    """`dflash-supervisor` as installed beside this Python, else the same main by module."""
    script = Path(sys.executable).with_name("dflash-supervisor")
    return [str(script)] if script.exists() else [sys.executable, "-m", "supervisor"]


@dataclass
class RealJob:
    directory: Path
    proc: subprocess.Popen[bytes]
    socket: str

    @property
    def log_path(self) -> Path:
        return self.directory / "daemon.log"

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the daemon's log and of each server's, for a failure message."""
        text = self.log_path.read_text(errors="replace")[-chars:]
        for path in sorted((self.directory / "logs").glob("*.log")):
            text += f"\n--- {path.name} ---\n" + path.read_text(errors="replace")[-chars:]
        return text

    def cli(self, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        # From the repository root, so `-m supervisor` works where the project is not
        # installed (a GPU machine given only the working tree).
        return subprocess.run([*cli_argv(), *args], capture_output=True, text=True,
                              timeout=timeout_s, stdin=subprocess.DEVNULL, cwd=REPO)

    def ctl(self, *args: str) -> str:
        out = self.cli("ctl", "--socket", self.socket, *args)
        if out.returncode != 0:
            raise AssertionError(f"ctl {' '.join(args)} exited {out.returncode}: {out.stderr}")
        return out.stdout

    def status(self) -> dict[str, Any] | None:
        """`status --json` as plain data; None while no daemon answers."""
        out = self.cli("status", "--json", "--socket", self.socket)
        if out.returncode != 0:
            return None
        return json.loads(out.stdout)

    def wait(self, condition: Callable[[dict[str, Any]], bool], what: str,
             timeout_s: float, explain: Callable[[dict[str, Any]], Any] | None = None
             ) -> dict[str, Any]:
        """Poll `status --json` until `condition`; on a timeout, say where things stood
        (and what `explain` makes of the last status)."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the daemon exited {self.proc.returncode} while waiting "
                                     f"for {what}:\n{self.log_tail()}")
            s = self.status()
            if s is not None:
                last = s
                if condition(s):
                    return s
            time.sleep(0.5)
        servers = [(x["name"], x["state"], x["state_reason"]) for x in (last or {}).get(
            "servers", [])]
        raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}; servers "
                             f"{servers}; job {(last or {}).get('job')}; paused "
                             f"{(last or {}).get('paused')}; "
                             f"{explain(last) if explain and last else ''}\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM (the daemon stops its servers); past a minute, SIGKILL the daemon and
        every server process group it recorded, so no SGLang is left holding the GPU."""
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
            return
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        con = sqlite3.connect(f"file:{self.directory / 'job.db'}?mode=ro", uri=True)
        try:
            pgids = [pgid for (pgid,) in con.execute("SELECT pgid FROM server_processes")]
        finally:
            con.close()
        for pgid in pgids:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start_job(directory: Path, data: dict[str, Any], *, shared_gpu: bool = True) -> RealJob:
    """`dflash-supervisor run` as a child process in its own session; with `shared_gpu`,
    through the shim that lets two servers share one GPU (shared_gpu.py)."""
    toml = write_toml(directory / "job.toml", data)
    main = ["-m", "tests.gpu.shared_gpu", "daemon"] if shared_gpu else ["-m", "supervisor"]
    with open(directory / "daemon.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, *main, "run", "--config", str(toml)],
                                cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return RealJob(directory, proc, data["control"]["socket"])


def nvml_problems(status: dict[str, Any]) -> list[str]:
    """What is missing from the NVML figures in `status --json` (the real pynvml path):
    power, its limit, utilisation, memory and the energy counter of GPU 0, and the job's
    energy so far from that counter. Empty when all are there."""
    gpus = status["gpus"]
    if not gpus["available"]:
        return [f"no GPU telemetry: {gpus['reason']}"]
    problems = [] if gpus["driver_version"] else ["no driver version"]
    g = next((g for g in gpus["gpus"] if g["index"] == 0), None)
    if g is None:
        return problems + ["GPU 0 not in the telemetry"]
    for key in ("power_w", "power_limit_w", "memory_used_bytes", "memory_total_bytes",
                "energy_j"):      # energy: the driver's counter (Volta and newer)
        if not g[key] or g[key] <= 0:
            problems.append(f"GPU 0 {key} = {g[key]!r} ({g['errors']})")
    if g["utilization_pct"] is None or not 0 <= g["utilization_pct"] <= 100:
        problems.append(f"GPU 0 utilization_pct = {g['utilization_pct']!r}")
    energy = status["energy"] or {}
    if not str(energy.get("source", "")).startswith("counter"):
        problems.append(f"energy source {energy.get('source')!r}")
    if not energy.get("kwh_so_far"):
        problems.append(f"kwh_so_far = {energy.get('kwh_so_far')!r}")
    return problems


def server(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in status["servers"] if s["name"] == name)


def in_flight(status: dict[str, Any]) -> int:
    return sum(s["in_flight"] for s in status["servers"])
