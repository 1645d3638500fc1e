"""The output is checked, not trusted, on a real job (simulated servers as child processes, a
real SQLite file, real shard files): shards deleted, cut, edited or with a half line appended
after a job are found at the next start and rewritten byte for byte from the DB; a DB that is
new, emptied or damaged never runs over existing output; `verify` says the same on demand."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from supervisor.job.store_setup import JobError
from tests.fixtures.fs_faults import cli
from tests.fixtures.job_toml import write_job_toml
from tests.fixtures.real_job import job_config, query, run_job

pytestmark = pytest.mark.slow

N = 120     # 50 a shard: three shards, the last one partial


def _refusal(config) -> str:
    """The JobError a job start ends with (run_job runs it inside a task group)."""
    with pytest.raises(BaseExceptionGroup) as exc:
        anyio.run(run_job, config)
    errors = exc.value.exceptions
    assert len(errors) == 1 and isinstance(errors[0], JobError), errors
    return str(errors[0])


def _finished_job(tmp_path: Path):
    config = job_config(tmp_path / "job", servers=2, prompts=N)
    _, result = anyio.run(run_job, config)
    assert result.finished, result.reason
    out = config.path(config.job.output)
    shards = sorted(out.glob("shard-*.jsonl"))
    assert len(shards) == 3
    return config, {p.name: p.read_bytes() for p in shards}


def test_shards_changed_after_the_job_are_found_and_rewritten(tmp_path: Path):
    config, original = _finished_job(tmp_path)
    out = config.path(config.job.output)
    state = config.path(config.job.state)
    # verify agrees with the output as written.
    ok = cli(["verify", "--state", str(state)])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    a, b, c = sorted(original)
    (out / a).unlink()                                               # deleted
    data = original[b]
    (out / b).write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 1])   # last line cut
    lines = original[c].splitlines(keepends=True)
    edited = json.loads(lines[0])
    edited["messages"][-1]["content"] = "an answer nobody generated"
    (out / c).write_bytes(json.dumps(edited).encode() + b"\n" + b"".join(lines[1:])
                          + b'{"id": "half')                         # edited + a half line
    bad = cli(["verify", "--state", str(state)])
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"{a}" in bad.stdout and "is missing" in bad.stdout and "3 missing or changed" in bad.stdout
    assert "Traceback" not in bad.stderr
    # verify alone changes nothing in the output; the next run rewrites the three shards.
    assert not (out / a).exists()
    _, result = anyio.run(run_job, config)
    assert result.finished
    assert {p.name: p.read_bytes() for p in out.glob("shard-*.jsonl")} == original
    mismatches = query(config, "SELECT subject FROM events WHERE kind = 'shard_mismatch' "
                               "ORDER BY subject")
    assert [m[0] for m in mismatches] == [a, b, c]
    assert query(config, "SELECT count(*) FROM shards WHERE status = 'uploaded'") == [(3,)]
    assert cli(["verify", "--state", str(state)]).returncode == 0


def test_an_emptied_db_over_existing_output_is_refused_naming_both_paths(tmp_path: Path):
    config, original = _finished_job(tmp_path)
    state = config.path(config.job.state)
    for suffix in ("-wal", "-shm"):
        Path(str(state) + suffix).unlink(missing_ok=True)
    state.write_bytes(b"")                                           # truncated to 0 bytes
    text = _refusal(config)
    assert str(state) in text and str(config.path(config.job.output)) in text
    assert "3 shards of this job" in text and "rebuild-state" in text and "move the output" in text
    out = config.path(config.job.output)
    assert {p.name: p.read_bytes() for p in out.glob("shard-*.jsonl")} == original


def test_a_db_with_a_damaged_page_never_runs(tmp_path: Path):
    config, _ = _finished_job(tmp_path)
    state = config.path(config.job.state)
    import sqlite3
    con = sqlite3.connect(state)
    page_size, pages = (con.execute("PRAGMA page_size").fetchone()[0],
                        con.execute("PRAGMA page_count").fetchone()[0])
    con.close()
    with open(state, "r+b") as f:
        f.seek(page_size * (pages - 2))
        f.write(os.urandom(page_size))
    assert "damaged" in _refusal(config)


def test_a_lost_db_is_rebuilt_from_the_output_and_the_job_redoes_nothing(tmp_path: Path):
    from supervisor.shards.rebuild_state import rebuild_from_config
    config, original = _finished_job(tmp_path)
    state = config.path(config.job.state)
    before = query(config, "SELECT id, content, finish_reason, completion_tokens, max_tokens, "
                           "attempts, finished_at, shard_id FROM prompts ORDER BY id")
    for suffix in ("", "-wal", "-shm"):
        Path(str(state) + suffix).unlink(missing_ok=True)
    # One line of the last shard is damaged: its prompt is generated again.
    out = config.path(config.job.output)
    last = sorted(original)[-1]
    lines = original[last].splitlines(keepends=True)
    (out / last).write_bytes(b"".join(lines[:-1]) + b'{"id": "cut off\n')
    summary, _, counts = rebuild_from_config(config)
    assert (summary.shards, summary.bad_lines, summary.to_rewrite) == (3, 1, [last])
    assert (counts.done, counts.pending) == (N - 1, 1)
    after = query(config, "SELECT id, content, finish_reason, completion_tokens, max_tokens, "
                          "attempts, finished_at, shard_id FROM prompts ORDER BY id")
    lost = json.loads(lines[-1])["id"]
    assert [r for r in after if r[0] != lost] == [r for r in before if r[0] != lost]
    _, result = anyio.run(run_job, config)
    assert result.finished
    # Two shards untouched; the damaged one rewritten with its other lines, and the lost
    # prompt answered again into a new shard.
    now = {p.name: p.read_bytes() for p in out.glob("shard-*.jsonl")}
    for key in sorted(original)[:2]:
        assert now[key] == original[key]
    assert now[last] == b"".join(lines[:-1])
    ids = [json.loads(l)["id"] for data in now.values() for l in data.splitlines()]
    assert len(ids) == N and len(set(ids)) == N
    assert query(config, "SELECT status, shard_id FROM prompts WHERE id = ?", lost) == [("done", 4)]


def test_failed_prompts_are_requeued_audited_and_run_reports_them(tmp_path: Path):
    # context-length 260 and max_tokens 256 pass the config check, but every prompt is longer
    # than the 4 tokens left: SGLang (the simulator) answers HTTP 400 to each.
    config = job_config(tmp_path / "job", servers=1, prompts=40, flags={"context-length": 260})
    _, result = anyio.run(run_job, config)
    failed = result.status.failed
    assert result.finished and failed > 0, result.status
    state = config.path(config.job.state)
    out = cli(["requeue", "--failed", "--reason-like", "no such text", "--state", str(state)])
    assert out.returncode == 0 and out.stdout.startswith("0 failed prompts"), out.stderr
    out = cli(["requeue", "--failed", "--reason-like", "context", "--state", str(state)])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{failed} failed prompts matching 'context' are pending again")
    assert query(config, "SELECT count(*) FROM prompts WHERE status = 'pending' "
                         "AND attempts = 0") == [(failed,)]
    (detail, actor), = query(config, "SELECT detail, actor FROM events "
                                     "WHERE kind = 'requeue_failed' AND detail LIKE '%context%'")
    d = json.loads(detail)
    assert actor == "cli" and d["count"] == failed and d["uid"] == os.getuid()
    # With the config fixed, `run` generates them; before, it says they failed (exit 4).
    toml = write_job_toml(tmp_path / "job", servers=1, prompts=40,
                          flags={"context-length": 100_000})
    ok = cli(["run", "--config", str(toml)], timeout=120)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert query(config, "SELECT status, count(*) FROM prompts GROUP BY status") == [("done", 40)]


def test_run_exits_4_when_prompts_failed_for_good(tmp_path: Path):
    from supervisor.commands.run import EXIT_PROMPTS_FAILED
    toml = write_job_toml(tmp_path / "job", servers=1, prompts=20, flags={"context-length": 260})
    out = cli(["run", "--config", str(toml)], timeout=120)
    assert out.returncode == EXIT_PROMPTS_FAILED == 4, out.stderr[-2000:]
    assert "finished with 20 failed prompts" in out.stderr
    assert "requeue --failed" in out.stderr


def test_a_db_older_than_its_output_is_refused(tmp_path: Path):
    """What a lost WAL or a restored old backup leaves: a DB that misses the last shards."""
    import shutil
    config, _ = _finished_job(tmp_path)
    state = config.path(config.job.state)
    shutil.copy(state, tmp_path / "old.db")         # closed cleanly: no WAL beside it
    bigger = job_config(tmp_path / "job", servers=2, prompts=2 * N)   # same job, more prompts
    _, result = anyio.run(run_job, bigger)
    assert result.finished
    # The first run's partial last shard stays; the new results fill shards 4 to 6.
    assert len(list(config.path(config.job.output).glob("shard-*.jsonl"))) == 6
    for suffix in ("-wal", "-shm"):
        Path(str(state) + suffix).unlink(missing_ok=True)
    shutil.copy(tmp_path / "old.db", state)
    text = _refusal(bigger)
    assert "holds 3 shards of this job" in text and "shard-000004.jsonl" in text
