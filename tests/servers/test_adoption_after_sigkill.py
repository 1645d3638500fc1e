"""A daemon killed with SIGKILL mid-run, and the next one on the same state DB: it adopts the
servers the first left running (same pids, no loading phase: the simulator takes 30 s to
load, so a reload would show), aborts on them the answers the dead daemon had in flight,
and finishes the job with every prompt exactly once. Real processes throughout: the
daemon is `python -m supervisor run --config PATH`, the servers `python -m supervisor.sim`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from state.records import InFlightClaim
from supervisor.sglang.request_ids import request_id
from tests.fixtures.real_job import (
    alive,
    expected_ids,
    free_base_port,
    live_group_members,
    query,
    shard_ids,
    transitions,
)
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.slow

PROMPTS = 400
LOAD_S = 30.0

CONFIG = """\
[job]
prompts = "prompts.jsonl"
state = "job.db"
output = "shards"
shard_size = 50
model = "sim"

[generation]
max_tokens = 256
enable_thinking = false

[servers]
count = 2
base_port = {base_port}
model_path = "sim/test-model"
command = {command}
startup_timeout_s = 90.0
health_interval_s = 0.5
health_timeout_s = 3.0
health_failures = 3
hang_timeout_s = 60.0
stop_grace_s = 3.0
backoff_initial_s = 0.1

[dispatch]
stop_grace_s = 0

[servers.flags]
max-running-requests = 8
sim-tokens-per-s = 400
sim-startup-s = {load_s}
"""

# Stands in for connections to the server that it has not yet seen close (SGLang and the
# simulator abort a streamed request when its client goes away, so after a SIGKILL on
# loopback most are gone at once; a half-open connection, or a disconnect SGLang notices
# late, keeps one running): streams each request id given, under that id, and prints how
# each one ended.
HOLDER = r"""
import json, sys, threading, httpx
def one(url, rid):
    body = {"model": "sim", "messages": [{"role": "user", "content": "held " + rid}],
            "max_tokens": 1000, "stream": True, "rid": rid}
    reason = None
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    for c in json.loads(line[6:]).get("choices", []):
                        reason = c.get("finish_reason") or reason
    except Exception as exc:
        reason = type(exc).__name__
    with lock:    # print() writes the line and its newline apart: threads interleave
        sys.stdout.write(json.dumps({"rid": rid, "finish_reason": reason}) + "\n")
        sys.stdout.flush()
lock = threading.Lock()
threads = [threading.Thread(target=one, args=(url, rid)) for url, rid in json.loads(sys.argv[1])]
for t in threads: t.start()
for t in threads: t.join()
"""


def _wait(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    # Any error is "not yet": the DB may not exist yet, a server may be loading.
    wait_until(condition, what, timeout_s, tolerate=(Exception,))


def _daemon(config_path: Path, log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "supervisor", "run", "--config",
                                 str(config_path)], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _first_completion_after(cfg: Any, t0: float) -> float | None:
    got = query(cfg, "SELECT min(finished_at) FROM prompts WHERE status = 'done' "
                     "AND finished_at >= ?", t0)[0][0]
    return None if got is None else got - t0


def _stall_share(ports: Any, share: float) -> None:
    for port in ports:
        httpx.post(f"http://127.0.0.1:{port}/sim/fault", json={"stall_share": share},
                   timeout=5, trust_env=False).raise_for_status()


def _sim_state(port: int) -> dict[str, Any]:
    return httpx.get(f"http://127.0.0.1:{port}/sim/state", timeout=5, trust_env=False).json()


def test_a_daemon_killed_mid_run_is_followed_by_one_that_adopts_its_servers(
        tmp_path: Path) -> None:
    from supervisor.config import load_config
    from supervisor.demo.prompts import write_demo_prompts

    write_demo_prompts(tmp_path / "prompts.jsonl", PROMPTS)
    base_port = free_base_port(2)
    command = json.dumps([sys.executable, "-m", "supervisor.sim"])
    config_path = tmp_path / "job.toml"
    config_path.write_text(CONFIG.format(base_port=base_port, command=command, load_s=LOAD_S))
    cfg = load_config(config_path)
    holder: subprocess.Popen[bytes] | None = None
    first = second = None
    pgids: dict[str, int] = {}
    try:
        cold_t0 = time.time()
        first = _daemon(config_path, tmp_path / "first.log")
        _wait(lambda: query(cfg, "SELECT count(*) FROM prompts WHERE status = 'done'")[0][0]
              >= 60, "60 prompts done by the first daemon", timeout_s=LOAD_S + 60)
        cold = _first_completion_after(cfg, cold_t0)
        servers = {n: (pid, started) for n, pid, started in
                   query(cfg, "SELECT name, pid, started_at FROM server_processes")}
        pgids = {n: g for n, g in query(cfg, "SELECT name, pgid FROM server_processes")}
        assert sorted(servers) == ["gpu0", "gpu1"]
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        assert all(alive(pid) for pid, _ in servers.values()), "the servers died with it"

        # What the dead daemon had in flight, as the DB says; the servers let go of those
        # requests when its connections closed.
        left = [InFlightClaim(i, a, s, t) for i, a, s, t in query(
            cfg, "SELECT id, attempts, server, started_at FROM prompts "
                 "WHERE status = 'in_flight'")]
        assert len(left) >= 4, "nothing was in flight at the kill"
        ports = {"gpu0": base_port, "gpu1": base_port + 1}
        _wait(lambda: all(_sim_state(p)["running"] + _sim_state(p)["queued"] == 0
                          for p in ports.values()), "the servers to drop the dead streams")
        held = [(f"http://127.0.0.1:{ports[c.server]}", request_id(c)) for c in left]
        # Each held request sticks halfway until aborted (the simulator's stall share: a
        # prompt's first request), so only an abort by its id can end it.
        _stall_share(ports.values(), 1.0)
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, json.dumps(held)],
                                  stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        _wait(lambda: sum(_sim_state(p)["running"] + _sim_state(p)["queued"]
                          for p in ports.values()) == len(held), "the held requests to run")
        _stall_share(ports.values(), 0.0)

        adopted_t0 = time.time()
        second = _daemon(config_path, tmp_path / "second.log")
        # On each server, /abort_request stopped exactly the requests named (the sim keeps
        # the ids it aborted; nothing else aborts by id here).
        for name, port in ports.items():
            wanted = {rid for url, rid in held if url.endswith(f":{port}")}
            _wait(lambda wanted=wanted, port=port: wanted <= set(_sim_state(port)["aborted_rids"]),
                  f"{name} to be told to abort what the dead daemon left on it",
                  timeout_s=LOAD_S / 2)
            assert set(_sim_state(port)["aborted_rids"]) == wanted
        rc = second.wait(timeout=120)
        out = (tmp_path / "second.log").read_text(errors="replace")
        assert rc == 0, out[-3000:]
        adopted = _first_completion_after(cfg, adopted_t0)
        assert holder.stdout is not None
        ended = [json.loads(line) for line in holder.stdout.read().decode().splitlines()]
        holder.wait(timeout=30)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if holder is not None:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
            assert holder.stdout is not None
            holder.stdout.close()
        for pgid in pgids.values():
            if live_group_members(pgid):
                os.killpg(pgid, signal.SIGKILL)
    print(f"\nfrom daemon start to first completion: cold {cold:.2f} s "
          f"(servers loading {LOAD_S:g} s), adopted {adopted:.2f} s")

    # The same servers, adopted without a loading phase, said once each.
    for name, (pid, _) in servers.items():
        assert out.count(f"{name}: adopting pid {pid} left running by an earlier daemon") == 1
        mine = [t for t in transitions(cfg, name) if t.detail.get("adopted")
                or t.reason.startswith("adopted pid")]
        assert [t.to for t in mine] == ["STARTING", "READY"], mine
        assert mine[0].reason.startswith(f"adopted pid {pid}, up ")
        assert mine[1].detail["pid"] == pid
    assert adopted is not None and cold is not None
    assert adopted < LOAD_S / 2 < cold, (adopted, cold)
    events = [json.loads(d) for (d,) in query(
        cfg, "SELECT detail FROM events WHERE kind = 'server_adopted' ORDER BY id")]
    assert sorted(e["pid"] for e in events) == sorted(pid for pid, _ in servers.values())

    # The answers in flight at the kill: aborted on their server by id, requeued.
    assert sum(e["left_in_flight"] for e in events) == len(left)
    assert sum(e["aborted"] for e in events) == len(left)
    assert sorted(e["rid"] for e in ended) == sorted(rid for _, rid in held)
    assert {e["finish_reason"] for e in ended} == {"abort"}, ended

    # 0 lost, 0 duplicated, no attempt counted for what was requeued; and the end of `run`
    # stopped every server, adopted or not.
    ids = shard_ids(cfg)
    assert len(ids) == len(set(ids)) and sorted(ids) == expected_ids(PROMPTS)
    assert query(cfg, "SELECT max(attempts) FROM prompts") == [(1,)]
    verify = subprocess.run([sys.executable, "-m", "supervisor", "verify", "--state",
                             str(cfg.path(cfg.job.state))], capture_output=True, text=True,
                            timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert {n: live_group_members(g) for n, g in pgids.items()} == {"gpu0": [], "gpu1": []}
    assert query(cfg, "SELECT * FROM server_processes") == []
