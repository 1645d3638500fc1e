"""The GPU test's scenario, one job driven through the daemon's CLI only: servers READY,
answers at a first max tokens, a live raise of it, one server's process group SIGKILLed and
restarted, the rest of the job to its end; then exactly-once shards and the DB's account.

Run on real SGLang by test_real_sglang.py, and on the simulator by
test_scenario_on_sim.py so the scenario itself is kept working where no GPU is.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from tests.gpu.sglang_job import RealJob, in_flight, nvml_problems, server

RAISED_MAX_TOKENS = 64
BATCH = 40          # answers to see in each phase before moving on


def db(directory: Path, sql: str, *args: object) -> list[tuple]:
    con = sqlite3.connect(f"file:{directory / 'job.db'}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def run_scenario(job: RealJob, *, prompts: int, check_nvml: bool,
                 finish_timeout_s: float = 240.0) -> None:
    # Hold dispatch while the servers load, so each phase below starts from a known point.
    # (The socket may open only after the daemon has checked the flags against SGLang's
    # --help, which imports SGLang: tens of seconds on a cold machine.)
    job.wait(lambda s: True, "the control socket", timeout_s=180)
    job.ctl("pause", "gpu test: held until both servers are READY")
    s = job.wait(lambda s: bool(s["paused"]), "the pause", timeout_s=30)
    assert s["job"]["done"] == 0, "answers before the pause: the servers were READY in seconds?"

    s = job.wait(lambda s: all(x["state"] == "READY" for x in s["servers"]),
                 "both servers READY", timeout_s=360)
    assert {x["name"] for x in s["servers"]} == {"gpu0", "gpu1"}

    # Phase 1: answers at the first limit.
    job.ctl("resume")
    job.wait(lambda s: s["job"]["done"] >= BATCH, f"{BATCH} answers", timeout_s=120)
    job.ctl("pause", "gpu test: raising max tokens")
    s = job.wait(lambda s: in_flight(s) == 0, "the requests in flight to finish", timeout_s=120)
    done_at_first = s["job"]["done"]
    assert done_at_first < prompts, "the job finished before max tokens could be raised"

    # Phase 2: a live max-tokens change through the control socket's CLI.
    job.ctl("max-tokens", str(RAISED_MAX_TOKENS))
    s = job.wait(lambda s: s["max_tokens"] == RAISED_MAX_TOKENS, "the new max tokens", 30)
    job.ctl("resume")
    job.wait(lambda s: s["job"]["done"] >= done_at_first + BATCH,
             "answers at the raised limit", timeout_s=120)
    if check_nvml:
        job.wait(lambda s: not nvml_problems(s), "NVML power, utilisation and energy",
                 timeout_s=30, explain=nvml_problems)
    # Held while gpu1 is looked up: each status call is a process start, seconds on a busy
    # machine, in which the rest of a fast simulated job could end before the kill.
    job.ctl("pause", "gpu test: before gpu1's kill")
    s = job.wait(lambda s: server(s, "gpu1")["pid"] is not None, "gpu1's pid", timeout_s=30)
    assert s["job"]["done"] < prompts, "the job finished before gpu1 could be killed"

    # Phase 3: SIGKILL one server's whole process group (SGLang's scheduler and detokenizer
    # are its children), with requests likely in flight (dispatch resumed just before: every
    # slot refills at once); the daemon must restart it.
    victim = server(s, "gpu1")
    pid = victim["pid"]
    assert pid and os.getpgid(pid) == pid, "each server runs in its own process group"
    restarts_before = victim["restarts"]
    job.ctl("resume")
    os.killpg(pid, signal.SIGKILL)
    job.ctl("pause", "gpu test: gpu1 restarting")
    s = job.wait(lambda s: server(s, "gpu1")["state"] == "READY"
                 and server(s, "gpu1")["pid"] not in (None, pid),
                 "gpu1 restarted and READY", timeout_s=300)
    restarted = server(s, "gpu1")
    assert restarted["restarts"] > restarts_before
    reason = restarted["last_exit_reason"] or ""
    assert "SIGKILL" in reason or "signal 9" in reason, reason
    assert server(s, "gpu0")["state"] == "READY"
    assert s["job"]["failed"] == 0, "requests cut off by the kill must not fail"

    # Phase 4: the rest of the job on both servers; the daemon exits 0 when it is done.
    job.ctl("resume")
    try:
        code = job.proc.wait(timeout=finish_timeout_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the job did not finish: {job.status()}\n{job.log_tail()}") from None
    assert code == 0, job.log_tail()




def shard_lines(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted((directory / "shards").rglob("*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines()]


def check_job_account(directory: Path, *, prompts: int, first: int) -> list[dict[str, Any]]:
    """Exactly once, all done, both limits used, both servers answered, the restarted one
    after its restart, the max-tokens change on record. Returns the shard lines."""
    lines = shard_lines(directory)
    ids = [obj["id"] for obj in lines]
    assert len(ids) == prompts and len(set(ids)) == prompts
    assert sorted(ids) == [f"demo-{i:06d}" for i in range(prompts)]
    limits = {obj["max_tokens"] for obj in lines}
    assert limits == {first, RAISED_MAX_TOKENS}, limits

    assert db(directory, "SELECT status, count(*) FROM prompts GROUP BY status") == \
        [("done", prompts)]
    servers = dict(db(directory, "SELECT server, count(*) FROM prompts GROUP BY server"))
    assert set(servers) == {"gpu0", "gpu1"}, servers
    ready = [t for (t,) in db(directory, "SELECT time FROM events WHERE kind = 'server_state' "
                              "AND subject = 'gpu1' AND json_extract(detail, '$.to') = 'READY' "
                              "ORDER BY id")]
    assert len(ready) >= 2, ready
    after = db(directory, "SELECT count(*) FROM prompts WHERE server = 'gpu1' AND "
               "finished_at > ?", ready[-1])[0][0]
    assert after > 0, "the restarted gpu1 answered nothing"
    changes = db(directory, "SELECT json_extract(detail, '$.to') FROM events "
                 "WHERE kind = 'max_tokens'")
    assert (RAISED_MAX_TOKENS,) in changes, changes
    return lines
