"""The directory shards are written into is checked at start, before the state DB is opened or
a prompt imported, and by `check`: a `job.output` that is a file, or a directory this process
cannot write (real permission bits, with root's override dropped), is refused in one line
(exit 2), leaving nothing behind; shard files already in the output are named for what they
are, with what to do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from supervisor.job.output_paths import output_dir_problem
from supervisor.job.store_setup import JobError, open_job_store
from tests.fixtures.dispatching import job_config
from tests.fixtures.fs_faults import assert_one_line, cli
from tests.fixtures.job_toml import job_data, write_toml
from tests.fixtures.real_prompts import write_jsonl


def _toml(directory: Path, **job: str) -> Path:
    """A job's config file (the simulator as its servers: nothing is launched here)."""
    data = job_data(directory, servers=1, prompts=20, job=job)
    return write_toml(directory / "job.toml", data)


def test_an_output_that_is_a_file_is_refused_before_the_db_is_opened(tmp_path: Path):
    (tmp_path / "out").write_text("not a directory\n")
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "prompt": "x"}])
    cfg = job_config(tmp_path, job={"prompts": str(prompts), "output": "out",
                                    "state": "state/job.db"})
    with pytest.raises(JobError) as exc:
        open_job_store(cfg)
    assert str(exc.value) == (f"job.output: {tmp_path / 'out'} is a file, not a directory; "
                              "shards are written into a directory: point it at one (it is "
                              "created if missing)")
    assert not (tmp_path / "state").exists()         # no DB, nothing imported


def test_run_refuses_an_output_file_with_exit_2_and_imports_nothing(tmp_path: Path):
    toml = _toml(tmp_path / "job", output="shards.jsonl")
    (tmp_path / "job" / "shards.jsonl").write_text("{}\n")
    out = cli(["run", "--config", str(toml)], timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "imported" not in out.stderr, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last == (f"dflash-supervisor: job.output: {tmp_path / 'job' / 'shards.jsonl'} is a "
                    "file, not a directory; shards are written into a directory: point it at "
                    "one (it is created if missing)")
    assert not (tmp_path / "job" / "job.db").exists()
    out = cli(["check", "--config", str(toml), "--skip-flag-check"])
    assert out.returncode == 2
    assert_one_line(out, "config error: job.output: ", "shards.jsonl is a file, not a directory")


def test_an_unwritable_output_is_refused_by_check_and_run(tmp_path: Path):
    toml = _toml(tmp_path / "job", output=str(tmp_path / "ro" / "shards"))
    (tmp_path / "ro" / "shards").mkdir(parents=True)
    (tmp_path / "ro" / "shards").chmod(0o555)
    (tmp_path / "job").chmod(0o777)                  # the state DB's directory stays writable
    out = cli(["check", "--config", str(toml), "--skip-flag-check"], no_file_override=True)
    assert out.returncode == 2, out.stdout + out.stderr
    assert_one_line(out, f"config error: job.output: {tmp_path / 'ro' / 'shards'}: the daemon "
                         "cannot write there (Permission denied, as ")
    out = cli(["run", "--config", str(toml)], no_file_override=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "cannot write there (Permission denied" in out.stderr.strip().splitlines()[-1]
    assert "imported" not in out.stderr and not (tmp_path / "job" / "job.db").exists()
    # Not there yet, and cannot be created where it would go: named with the parent.
    (tmp_path / "ro" / "shards").rmdir()
    (tmp_path / "ro").chmod(0o555)
    out = cli(["check", "--config", str(toml), "--skip-flag-check"], no_file_override=True)
    assert out.returncode == 2
    assert_one_line(out, f"job.output: {tmp_path / 'ro' / 'shards'} cannot be created: the "
                         f"daemon cannot write in {tmp_path / 'ro'} (Permission denied")


def test_a_writable_or_creatable_output_passes_and_the_probe_leaves_nothing(tmp_path: Path):
    cfg = job_config(tmp_path, job={"output": "a/b/out"})
    assert output_dir_problem(cfg) is None
    assert list(tmp_path.iterdir()) == []            # nothing created by a check
    (tmp_path / "a" / "b" / "out").mkdir(parents=True)
    assert output_dir_problem(cfg) is None
    assert list((tmp_path / "a" / "b" / "out").iterdir()) == []
    # Under a file: cannot be created.
    (tmp_path / "f").write_text("")
    assert output_dir_problem(job_config(tmp_path, job={"output": "f/out"})) == (
        f"job.output: {tmp_path / 'f' / 'out'} cannot be created: {tmp_path / 'f'} is a file, "
        "not a directory")


def test_an_s3_jobs_spool_is_checked_by_its_own_key(tmp_path: Path):
    (tmp_path / "spool").write_text("")
    cfg = job_config(tmp_path, job={"output": "s3://bucket/run/"}, uploads={"spool_dir": "spool"})
    assert output_dir_problem(cfg) == (f"uploads.spool_dir: {tmp_path / 'spool'} is a file, "
                                       "not a directory; shards are written into a directory: "
                                       "point it at one (it is created if missing)")


def test_stray_shards_are_named_for_what_they_are_by_check_and_at_start(tmp_path: Path):
    toml = _toml(tmp_path, output="out")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "shard-000003.jsonl").write_text('{"id": "x"}\n')
    (tmp_path / "out" / "notes.jsonl").write_text("{}\n")          # not a shard: ignored
    out = cli(["check", "--config", str(toml), "--skip-flag-check"])
    assert out.returncode == 2
    assert_one_line(out, f"config error: job.output: {tmp_path / 'out'} already holds 1 shard "
                         "file named like this job's (shard-000003.jsonl) and the state DB "
                         f"{tmp_path / 'job.db'} does not exist yet: an earlier job's output, "
                         "or this job's with its DB lost. The daemon will refuse to start over "
                         "them. Point job.state at that job's DB, rebuild one from them "
                         f"(`dflash-supervisor rebuild-state --config {toml}`), or move them "
                         "aside to start over")
    out = cli(["run", "--config", str(toml)], timeout=120)
    assert out.returncode == 2
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"dflash-supervisor: job.output: {tmp_path / 'out'} holds 1 shard of "
                           "this job that the state DB "), last
    assert "rebuild-state" in last and "imported" not in out.stderr


def test_the_check_does_not_depend_on_the_process_umask(tmp_path: Path):
    # The probe file is created and removed whatever the umask; a 0o777 umask still works.
    old = os.umask(0o777)
    try:
        assert output_dir_problem(job_config(tmp_path, job={"output": "out"})) is None
    finally:
        os.umask(old)
