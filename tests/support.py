"""Helpers for tests and benchmarks: free loopback ports, simulated SGLang servers as real
child processes, the shared real prompt data."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
# The shared data sits beside the main checkout (/work/shared beside /work/main); a git
# worktree is one level deeper.
SHARED_DATA = next((p for p in (REPO.parent / "shared" / "data",
                                REPO.parent.parent / "shared" / "data") if p.exists()),
                   REPO.parent / "shared" / "data")


def read_db(path: Path, sql: str, *args: object) -> list[tuple]:
    """Read a state DB the way an auditor would: sqlite3, read-only, beside a live daemon."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shared_prompts() -> list[dict]:
    """MT-bench and Vicuna-bench questions (real prompts nobody here wrote), as
    messages-shaped rows with ids; skips the test when the data is not present."""
    rows = []
    for name in ("mt_bench_questions.jsonl", "vicuna_bench_questions.jsonl"):
        path = SHARED_DATA / name
        if not path.exists():
            pytest.skip(f"real prompt data not found at {path}")
        for line in path.read_text(encoding="utf-8").splitlines():
            q = json.loads(line)
            rows.append({"id": f"{name.split('_')[0]}-{q['question_id']}",
                         "messages": [{"role": "user", "content": q["turns"][0]}]})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


@dataclass
class SimServer:
    proc: subprocess.Popen
    port: int
    log: Path | None = None         # its stdout and stderr, merged

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log is not None else ""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)


def sim_argv(port: int, *flags: str) -> list[str]:
    return [sys.executable, "-m", "supervisor.sim", "--model-path", "sim/test-model",
            "--host", "127.0.0.1", "--port", str(port), *flags]


def wait_healthy(base_url: str, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"simulated server exited with {proc.returncode}")
            try:
                if client.get(base_url + "/health_generate", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    raise RuntimeError(f"{base_url} not healthy within {timeout_s} s")


