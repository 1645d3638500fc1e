"""Running the real Job in-process on simulated SGLang servers (real child processes on
loopback, a real SQLite file, real shards), and reading back what it did.

The supervision tests drive a job from a second task while it runs — injecting a fault
into one server, asking the fleet for a rolling restart — so they need the Job object,
not only its exit status; the daemon's CLI runs exactly this Job.
"""

from __future__ import annotations

import json
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio
import httpx

from supervisor.config import JobConfig, parse_config
from supervisor.free_ports import free_base_port
from supervisor.demo.prompts import write_demo_prompts
from supervisor.gpu.fake_source import FakeGpuSource
from supervisor.job import Job, JobResult
from supervisor.job.status import JobStatus
from supervisor.servers.fleet import FleetOptions
from supervisor.servers.server_state import ServerState
from tests.support import read_db

# Every prompt decodes max_tokens tokens (the simulated model's lengths are mostly far
# longer) at tokens-per-s × time-scale tokens a second: 256 / 2,560 = 0.1 s a request, so a
# slot finishes about ten prompts a second and a fault always catches requests in flight.
MAX_TOKENS = 256
SIM_FLAGS: dict[str, Any] = {"sim-tokens-per-s": 50, "sim-time-scale": 51.2,
                             "sim-startup-s": 10.0}   # 10 simulated s = 0.2 s of loading
SLOTS = 8

# Settings that make every reaction quick; a test overrides what it is about.
FAST_SERVERS: dict[str, Any] = {
    "startup_timeout_s": 30.0, "health_interval_s": 0.2, "health_timeout_s": 2.0,
    "health_failures": 3, "hang_timeout_s": 10.0, "stop_grace_s": 3.0,
    "drain_timeout_s": 10.0, "backoff_initial_s": 0.1, "backoff_max_s": 0.5,
    "max_failures": 3, "failure_window_s": 120.0,
}


def fast_fleet(base_env: dict[str, str] | None = None) -> FleetOptions:
    return FleetOptions(rng=random.Random(5), exit_poll_s=0.05, startup_probe_s=0.05,
                        kill_wait_s=5.0, base_env=base_env)

WRAPPER = Path(__file__).with_name("broken_gpu_launch.py")


def job_config(directory: Path, *, servers: int, prompts: int, flags: dict[str, Any] | None = None,
               command: list[str] | None = None, **overrides: Any) -> JobConfig:
    directory.mkdir(parents=True, exist_ok=True)
    prompts_file = directory / "prompts.jsonl"
    write_demo_prompts(prompts_file, prompts)
    data: dict[str, Any] = {
        "job": {"prompts": str(prompts_file), "state": "job.db", "output": "shards",
                "shard_size": 50, "model": "sim"},
        "generation": {"max_tokens": MAX_TOKENS, "enable_thinking": False},
        "servers": {
            "count": servers, "base_port": free_base_port(servers),
            "model_path": "sim/test-model",
            "command": command or [sys.executable, "-m", "supervisor.sim"],
            **FAST_SERVERS, **overrides,
            "flags": {"max-running-requests": SLOTS, **SIM_FLAGS, **(flags or {})},
        },
        "control": {"socket": str(directory / "control.sock")},
    }
    return parse_config(data, base_dir=directory)


Driver = Callable[[Job], Awaitable[None]]


async def run_job(config: JobConfig, driver: Driver | None = None, *, timeout_s: float = 60.0,
                  base_env: dict[str, str] | None = None,
                  on_status: Callable[[JobStatus], None] | None = None) -> tuple[Job, JobResult]:
    """Run the job to its end while `driver` acts on it; both must finish in time.
    `on_status` sees each status the job's own loop takes, up to the one that ends it."""
    job = Job(config, fleet_options=fast_fleet(base_env), status_interval_s=0.05,
              on_status=on_status,
              gpu_source=FakeGpuSource(count=len(config.servers.gpu_list)),
              handle_signals=False)
    result: JobResult | None = None

    async def main() -> None:
        nonlocal result
        result = await job.run()

    with anyio.fail_after(timeout_s):
        async with anyio.create_task_group() as tg:
            tg.start_soon(main)
            if driver is not None:
                await driver(job)
    assert result is not None
    return job, result


# -- acting on a running job ------------------------------------------------------------------

async def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0,
                   poll_s: float = 0.02) -> None:
    with anyio.move_on_after(timeout_s):
        while not condition():
            await anyio.sleep(poll_s)
        return
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


async def wait_fleet(job: Job) -> Any:
    await wait_for(lambda: job.fleet is not None, "the fleet to exist")
    return job.fleet


def state_of(job: Job, name: str) -> ServerState:
    assert job.fleet is not None
    return job.fleet.servers[name].state


def completed_on(job: Job, name: str) -> int:
    assert job.dispatcher is not None
    return job.dispatcher.progress(name).completed


def in_flight_on(job: Job, name: str) -> int:
    assert job.dispatcher is not None
    return job.dispatcher.progress(name).in_flight


async def sim_fault(port: int, fault: str) -> None:
    """POST /sim/fault to the simulated server on `port`."""
    async with httpx.AsyncClient(trust_env=False) as client:
        resp = await client.post(f"http://127.0.0.1:{port}/sim/fault", json={"fault": fault},
                                 timeout=5.0)
        resp.raise_for_status()


async def sim_get(port: int, path: str) -> Any:
    async with httpx.AsyncClient(trust_env=False) as client:
        resp = await client.get(f"http://127.0.0.1:{port}{path}", timeout=5.0)
        resp.raise_for_status()
        return resp.json()


async def sim_state(port: int) -> dict[str, Any]:
    return await sim_get(port, "/sim/state")


# -- reading back what happened ---------------------------------------------------------------

def query(config: JobConfig, sql: str, *args: Any) -> list[tuple]:
    """Read-only, as an operator with sqlite3 would."""
    return read_db(config.path(config.job.state), sql, *args)


@dataclass(frozen=True)
class Transition:
    subject: str
    frm: str
    to: str
    reason: str
    actor: str
    detail: dict[str, Any]


def transitions(config: JobConfig, subject: str | None = None) -> list[Transition]:
    rows = query(config, "SELECT subject, detail, actor FROM events WHERE kind = 'server_state' "
                 "ORDER BY id")
    out = []
    for subj, detail, actor in rows:
        d = json.loads(detail)
        if subject is None or subj == subject:
            out.append(Transition(subj, d["from"], d["to"], d["reason"], actor, d))
    return out


def shard_ids(config: JobConfig) -> list[str]:
    ids = []
    for path in sorted(config.path(config.job.output).rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            ids.append(json.loads(line)["id"])
    return ids


def expected_ids(n: int) -> list[str]:
    return [f"demo-{i:06d}" for i in range(n)]


def assert_every_prompt_once(config: JobConfig, result: JobResult, n: int) -> None:
    assert result.finished, result.reason
    ids = shard_ids(config)
    assert len(ids) == len(set(ids)), "a prompt is in the shards twice"
    assert sorted(ids) == expected_ids(n)
    # Requests cut off by a dying or restarted server went back to pending without counting
    # as an attempt: every prompt was answered on its first counted attempt.
    assert query(config, "SELECT status, count(*), max(attempts) FROM prompts "
                 "GROUP BY status") == [("done", n, 1)]


def recorded_pgids(config: JobConfig) -> list[int]:
    """Every process group a server ran in (each is started in its own session, so its pid
    is its pgid), from the pids in the READY and STOPPING events."""
    return sorted({t.detail["pid"] for t in transitions(config)
                   if t.to in ("READY", "STOPPING") and t.detail.get("pid")})


def live_group_members(pgid: int) -> list[int]:
    """Processes (not zombies) in the process group, read from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        # After the command: state, ppid, pgrp.
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    """Running, not a zombie (a reaped-later child of a process that is gone holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def assert_nothing_left(config: JobConfig, extra_pids: list[int] = ()) -> None:
    """No process is left in any process group a server ran in, none of the given pids
    (servers' children) is alive, and no server is recorded as running."""
    pgids = recorded_pgids(config)
    assert pgids
    left = {pgid: live_group_members(pgid) for pgid in pgids}
    assert not any(left.values()), f"processes left in server process groups: {left}"
    assert not [p for p in extra_pids if alive(p)], "a server's child outlived the daemon"
    assert query(config, "SELECT name, pid FROM server_processes") == []
