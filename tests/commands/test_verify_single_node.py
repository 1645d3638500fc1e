"""`dflash-supervisor verify` on one finished single-node demo job (a real run on simulated
servers, local output, no state backup): the DB form checks what it is pointed at and refuses
to guess for a copied job; the prompt-file form passes the clean job, saying once what it could
not check; `--help` shows both forms and `--integrity` says it ran."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

N_PROMPTS = 1200        # three shards of 500 (the last one partial)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "supervisor", *args], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("single") / "demo"
    ran = cli("demo", "--dir", str(d), "--quiet", "--instant", "--prompts", str(N_PROMPTS))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return d


@pytest.fixture
def damaged_copy(job: Path, tmp_path: Path) -> Path:
    """The auditor's copy of the job, with one shard grown by a byte and one stray shard."""
    copy = tmp_path / "copy"
    shutil.copytree(job, copy)
    shards = sorted((copy / "shards").glob("shard-*.jsonl"))
    with open(shards[1], "ab") as f:
        f.write(b"\n")
    shutil.copy(shards[0], copy / "shards" / "shard-000099.jsonl")
    return copy


def test_a_copied_job_is_not_checked_against_its_original(job: Path, damaged_copy: Path):
    guessed = cli("verify", "--state", str(damaged_copy / "job.db"))
    assert guessed.returncode == 2, guessed.stdout + guessed.stderr
    assert guessed.stdout == ""
    assert f"the job ran with its DB at {job / 'job.db'}" in guessed.stderr
    assert "--output PATH" in guessed.stderr and len(guessed.stderr.splitlines()) == 1
    pointed = cli("verify", "--state", str(damaged_copy / "job.db"),
                  "--output", str(damaged_copy / "shards"))
    assert pointed.returncode == 1, pointed.stdout + pointed.stderr
    assert f"{damaged_copy / 'shards' / 'shard-000002.jsonl'} holds" in pointed.stdout
    assert "shard-000099.jsonl: in the output, unknown to the DB" in pointed.stdout
    # The original is untouched, and still checks clean where it is.
    original = cli("verify", "--state", str(job / "job.db"))
    assert original.returncode == 0, original.stdout + original.stderr
    assert "3 shards checked, 0 missing or changed" in original.stdout


def test_the_prompt_file_form_passes_a_clean_single_node_job(job: Path):
    prompts = str(job / f"prompts-{N_PROMPTS}.jsonl")
    plain = cli("verify", "--prompts", prompts, "--output", str(job / "shards"), "--quiet")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert f"{N_PROMPTS} in the file, {N_PROMPTS} present exactly once" in plain.stdout
    assert "(3 with no recorded checksum: not compared)" in plain.stdout
    assert plain.stdout.count("checksums not checked") == 1
    assert "verify: complete and clean" in plain.stdout
    with_db = cli("verify", "--prompts", prompts, "--output", str(job / "shards"), "--quiet",
                  "--state", str(job / "job.db"))
    assert with_db.returncode == 0, with_db.stdout + with_db.stderr
    assert "not checked" not in with_db.stdout and "not compared" not in with_db.stdout


def test_the_prompt_file_form_with_a_db_finds_changed_bytes(job: Path, damaged_copy: Path):
    (damaged_copy / "shards" / "shard-000099.jsonl").unlink()
    found = cli("verify", "--prompts", str(job / f"prompts-{N_PROMPTS}.jsonl"), "--quiet",
                "--output", str(damaged_copy / "shards"), "--state", str(job / "job.db"))
    assert found.returncode == 1, found.stdout + found.stderr
    assert "shards not matching their recorded checksum: 1" in found.stdout
    assert "shard-000002.jsonl: " in found.stdout


def test_help_shows_both_forms_and_integrity_says_it_ran(job: Path):
    for argv in (["verify", "--help"], ["verify", "--state", "x.db", "--help"]):
        shown = cli(*argv)
        assert shown.returncode == 0, shown.stderr
        assert "verify --prompts FILE --output PREFIX [--state DB]" in shown.stdout
        assert "verify --state DB [--output PATH] [--read-back] [--integrity]" in shown.stdout
    checked = cli("verify", "--state", str(job / "job.db"), "--integrity")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{job / 'job.db'}: SQLite integrity_check: ok" in checked.stdout
