"""The audit views: every query state/README.md documents runs, with the tools it names
(`sqlite-utils` and `sqlite3`), against the DB of a job while its daemon runs, and answers
what the job really did (a crash, an operator's actions, prompts too long, two max tokens)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from state.schema import MIGRATIONS, SCHEMA_VERSION, migrate
from state.store import Store
from supervisor.job.main_loop import Job
from supervisor.servers.server_state import ServerState
from tests.fixtures.real_job import (
    completed_on,
    job_config,
    query,
    run_job,
    sim_fault,
    state_of,
    wait_fleet,
    wait_for,
)

README = Path(__file__).resolve().parents[2] / "state" / "README.md"
DOCUMENTED_DB = "/var/lib/dflash-supervisor/job.db"
SQLITE_UTILS = Path(sys.executable).parent / "sqlite-utils"


def documented_queries() -> dict[str, list[str]]:
    """view name -> the command lines in its README section."""
    text = README.read_text()
    section = text[text.index("## Audit views"):]
    section = section[:section.index("\n## ", 3)]
    out: dict[str, list[str]] = {}
    for part in section.split("\n### ")[1:]:
        name = re.match(r"`(\w+)`", part).group(1)
        out[name] = [line for line in part.splitlines()
                     if line.startswith(("sqlite-utils ", "sqlite3 "))]
    return out


def test_every_view_is_documented_with_one_query_per_tool(tmp_path: Path) -> None:
    with Store.open(tmp_path / "job.db"):
        pass
    views = {r[0] for r in sqlite3.connect(tmp_path / "job.db").execute(
        "SELECT name FROM sqlite_master WHERE type = 'view'")}
    docs = documented_queries()
    assert set(docs) == views
    for name, lines in docs.items():
        assert [line.split()[0] for line in lines] == ["sqlite-utils", "sqlite3"], name
        assert all(name in line for line in lines), name


def test_a_version_1_db_gains_the_views_and_keeps_its_rows(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "job.db", isolation_level=None)
    migrate(conn, target=1)
    conn.execute("INSERT INTO prompts (id, messages, status) VALUES ('a', '[]', 'failed')")
    conn.execute("UPDATE status_counts SET n = 1 WHERE status = 'failed'")
    conn.close()
    with Store.open(tmp_path / "job.db"):
        pass
    conn = sqlite3.connect(tmp_path / "job.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 2
    assert conn.execute("SELECT status, prompts, pct FROM audit_progress WHERE prompts > 0"
                        ).fetchall() == [("failed", 1, 100.0)]
    assert conn.execute("SELECT reason, prompts FROM audit_failures").fetchall() == [
        ("(no reason recorded)", 1)]
    assert len(MIGRATIONS) == SCHEMA_VERSION


def _run(line: str, db: Path) -> str:
    argv = shlex.split(line.replace(DOCUMENTED_DB, str(db)))
    if argv[0] == "sqlite-utils":
        argv[0] = str(SQLITE_UTILS)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not out.stderr, (line, out.stderr)
    return out.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="the sqlite3 command is not installed")
async def test_documented_queries_answer_for_a_running_job(tmp_path: Path) -> None:
    prompts = 600
    # Prompts of 30 tokens or more do not fit max tokens 256 in a 286-token context: SGLang
    # (the simulator) refuses them with a 400, so they fail with its message.
    cfg = job_config(tmp_path, servers=2, prompts=prompts, flags={"context-length": 286})
    db = cfg.path(cfg.job.state)
    outputs: dict[str, list[str]] = {}

    async def audit_mid_job(job: Job) -> None:
        await wait_fleet(job)
        await wait_for(lambda: completed_on(job, "gpu0") >= 40, "40 completions on gpu0")
        await sim_fault(cfg.servers.base_port, "crash")
        assert job.dispatcher is not None
        await job.dispatcher.set_max_tokens(200, "user:alice")
        await wait_for(lambda: completed_on(job, "gpu1") >= 150, "150 completions on gpu1")
        await wait_for(lambda: state_of(job, "gpu0") is ServerState.READY,
                       "gpu0 back after its crash")
        # An operator's pause holds the job mid-way while the auditor reads: the daemon runs.
        await job.dispatcher.pause("operator", "audit", "user:alice")
        for name, lines in documented_queries().items():
            outputs[name] = [await anyio.to_thread.run_sync(_run, line, db) for line in lines]
        remaining = query(cfg, "SELECT sum(n) FROM status_counts WHERE status IN "
                               "('pending', 'in_flight')")[0][0]
        assert remaining > 0, "the job ended before the audit: it proves nothing"
        await job.dispatcher.resume("operator", "user:alice")

    _, result = await run_job(cfg, audit_mid_job, timeout_s=90)
    assert result.finished, result.reason

    def su(name: str) -> list[dict]:
        return json.loads(outputs[name][0])

    def s3(name: str) -> list[str]:
        return outputs[name][1].splitlines()

    progress = {r["status"]: r["prompts"] for r in su("audit_progress")}
    assert sum(progress.values()) == prompts and progress["done"] > 0 and progress["pending"] > 0
    assert s3("audit_progress")[0].split() == ["status", "prompts", "pct"]

    failures = su("audit_failures")
    too_long = [r for r in failures if "maximum context length of 286" in r["reason"]]
    assert too_long and too_long[0]["prompts"] >= 1, failures
    assert s3("audit_failures")[0].split() == ["prompts", "reason"]

    restarts = su("audit_restarts")
    assert {"server": "gpu0", "cause": "crash", "restarts": 1, "gave_up": 0} in restarts, restarts
    assert not [r for r in restarts if r["server"] == "gpu1"]
    assert [line.split() for line in s3("audit_restarts")[2:]] == [["gpu0", "1"]]

    limits = {r["max_tokens"]: r for r in su("audit_truncation")}
    assert 256 in limits and limits[256]["done"] > 0
    assert s3("audit_truncation")[0].split() == ["max_tokens", "truncated", "truncated_pct"]

    actions = su("audit_operator_actions")
    assert [(a["user"], a["action"], a["subject"]) for a in actions] == [
        ("user:alice", "max_tokens", "generation"), ("user:alice", "paused", "operator")]
    grouped = {tuple(line.split()[:3]) for line in s3("audit_operator_actions")[2:]}
    assert grouped == {("user:alice", "max_tokens", "1"), ("user:alice", "paused", "1")}

    for row in su("audit_shards_not_uploaded"):
        assert row["status"] in ("assigned", "written")
    assert s3("audit_shards_not_uploaded")[0].split() == ["shards", "bytes"]
    # At the end of the finished job nothing is left to upload.
    assert query(cfg, "SELECT count(*) FROM audit_shards_not_uploaded") == [(0,)]
