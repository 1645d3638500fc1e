"""What the benchmarks run against, built on the product alone (its CLI, its control client,
the simulated server, sqlite3 read-only): a daemon on simulated servers, moto's S3 server,
a state DB read the way an auditor reads it. Nothing here imports tests/, so changing a
test helper never changes a benchmark's figures."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from supervisor.client.control_client import ControlClient, ControlUnreachable
from supervisor.demo.free_ports import free_base_port, free_port
from supervisor.demo.prompts import write_demo_prompts

ROOT = Path(__file__).resolve().parents[1]
# Real chat questions (a JSONL file of prompts) for the benchmarks that want real text.
# FastChat's MT-bench and Vicuna-bench questions, beside the repository (never stored in it).
SHARED_DATA = Path(os.environ.get("DFLASH_REAL_PROMPT_SETS", ROOT.parent / "shared" / "data"))
CHAT_QUESTIONS = ROOT / "tests" / "fixtures" / "prompts" / "chat_questions.jsonl"


def read_db(path: Path, sql: str, *args: object) -> list[tuple]:
    """sqlite3, read-only, beside a live daemon."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


# -- a daemon on simulated servers ---------------------------------------------------------

# About 1 s a request: a job of 20,000 prompts never ends during a benchmark.
SIM_FLAGS: dict[str, Any] = {"max-running-requests": 8, "sim-tokens-per-s": 50,
                             "sim-time-scale": 5.0, "sim-startup-s": 1.0,
                             "context-length": 4096}


def config_dict(directory: Path, *, servers: int = 2, prompts: int = 20_000,
                control: dict[str, Any] | None = None) -> dict[str, Any]:
    """A job on `servers` simulated servers (edit the dict before `spawn`)."""
    directory.mkdir(parents=True, exist_ok=True)
    prompts_file = directory / "prompts.jsonl"
    write_demo_prompts(prompts_file, prompts)
    return {
        "job": {"prompts": str(prompts_file), "state": "job.db", "output": "shards",
                "shard_size": 100, "model": "sim"},
        "generation": {"max_tokens": 256, "enable_thinking": False},
        "servers": {"count": servers, "base_port": free_base_port(servers),
                    "model_path": "sim/bench-model",
                    "command": [sys.executable, "-m", "supervisor.sim"],
                    "startup_timeout_s": 30.0, "health_interval_s": 0.2,
                    "flags": dict(SIM_FLAGS)},
        "quality": {"metrics_window_s": 5.0},
        "control": {"socket": str(directory / "control.sock"), "interval_s": 0.25,
                    **(control or {})},
    }


def toml_text(data: dict[str, Any]) -> str:
    # Two levels (sections, and servers.flags); JSON's scalars and arrays are TOML's too.
    lines: list[str] = []
    for name, values in data.items():
        lines.append(f"[{name}]")
        lines += [f'"{k}" = {json.dumps(v)}' for k, v in values.items() if not isinstance(v, dict)]
        for sub, table in ((k, v) for k, v in values.items() if isinstance(v, dict)):
            lines.append(f"[{name}.{sub}]")
            lines += [f'"{k}" = {json.dumps(v)}' for k, v in table.items()]
    return "\n".join(lines) + "\n"


def spawn(directory: Path, data: dict[str, Any]) -> subprocess.Popen[bytes]:
    """`dflash-supervisor run` on `data` in its own session, its output in daemon.log."""
    (directory / "job.toml").write_text(toml_text(data))
    with open(directory / "daemon.log", "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "supervisor", "run", "--config",
                                 str(directory / "job.toml")], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=directory, env={**os.environ, "PYTHONPATH": str(ROOT)})


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    directory: Path
    socket: str

    def client(self, **kwargs: Any) -> ControlClient:
        return ControlClient(self.socket, **kwargs)

    def log(self) -> str:
        return (self.directory / "daemon.log").read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        return self.proc.returncode


def wait_exit(d: Daemon, timeout_s: float, what: str) -> None:
    """Until the daemon's job ends and it exits; SystemExit with its log past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while d.proc.poll() is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not done in {timeout_s:g} s: {d.log()[-2000:]}")
        time.sleep(0.5)


def start(directory: Path, **kwargs: Any) -> Daemon:
    """A daemon answering on its socket with every server READY (60 s at most)."""
    data = config_dict(directory, **kwargs)
    d = Daemon(spawn(directory, data), directory, data["control"]["socket"])
    deadline = time.monotonic() + 60
    try:
        with d.client(timeout_s=2.0) as client:
            while True:
                if d.proc.poll() is not None:
                    raise SystemExit(f"daemon exited {d.proc.returncode}: {d.log()[-2000:]}")
                try:
                    if all(s.state.value == "READY" for s in client.status().servers):
                        return d
                except ControlUnreachable:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"daemon not ready after 60 s: {d.log()[-2000:]}")
                time.sleep(0.05)
    except BaseException:
        d.stop()          # a daemon that never became usable is not left running
        raise


# -- moto's S3 server ---------------------------------------------------------------------

DUMMY_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
             "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
             "AWS_CONFIG_FILE": "/nonexistent/aws-config",
             "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
             "AWS_EC2_METADATA_DISABLED": "true",
             "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
UNSET = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
         "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
         "AWS_CA_BUNDLE")


def use_dummy_aws() -> None:
    """This process's S3 clients see only dummy credentials and no proxy."""
    for name in UNSET:
        os.environ.pop(name, None)
    os.environ.update(DUMMY_AWS)


def start_moto(log_path: Path, timeout_s: float = 30.0) -> tuple[subprocess.Popen[bytes], str]:
    """moto's standalone server on a free loopback port; (process, endpoint URL)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                 "-p", str(port)], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    with httpx.Client(trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"moto exited {proc.returncode}: {log_path.read_text()[-2000:]}")
            try:
                if client.get(url + "/", timeout=1.0).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    raise SystemExit(f"moto not answering on {url} within {timeout_s} s")


def s3_client(endpoint_url: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
        config=Config(proxies={}, request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"))
