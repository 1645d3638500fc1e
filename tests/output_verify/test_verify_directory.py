"""`dflash-supervisor verify --prompts --output DIR` on the real output of three nodes, then on
copies of it with one thing wrong each: every kind of damage is named and exits 1."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.prompts.prompt_import import partition_of
from tests.fixtures.multinode_nodes import Node
from tests.fixtures.node_config import node_config
from tests.fixtures.real_prompts import write_jsonl

pytestmark = pytest.mark.slow

N_PROMPTS = 240


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Three nodes (partitions 0..2) run one prompt file to the end into one directory."""
    root = tmp_path_factory.mktemp("three-nodes")
    prompts = write_jsonl(root / "prompts.jsonl",
                          [{"id": f"q{i:04d}", "prompt": f"question {i}"} for i in range(N_PROMPTS)])
    output = root / "out"
    nodes = [Node(i, node_config(root / f"node{i}.toml", prompts=prompts, output=str(output),
                                 partition=f"{i}/3"), root / f"node{i}") for i in range(3)]
    try:
        for node in nodes:
            node.start(dict(os.environ))
        for node in nodes:
            assert node.wait() == 0, node.log_tail()
    finally:
        for node in nodes:
            node.stop()
    return prompts, output


def verify(prompts: Path, output: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "supervisor", "verify", "--prompts", str(prompts),
                           "--output", str(output), *extra], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def damaged(finished_job: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    prompts, output = finished_job
    copy = tmp_path / "out"
    shutil.copytree(output, copy)
    return prompts, copy


def _shards(output: Path, part: int) -> list[Path]:
    return sorted((output / f"part-{part:04d}-of-0003").glob("shard-*.jsonl"))


def test_a_finished_three_node_job_verifies_clean(finished_job: tuple[Path, Path]):
    prompts, output = finished_job
    proc = verify(*finished_job)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{N_PROMPTS} in the file, {N_PROMPTS} present exactly once" in proc.stdout
    assert "3 partitions" in proc.stdout
    assert re.search(r"verify: \d+/\d+ shards, \d+ lines", proc.stderr)   # progress shown


def test_a_deleted_shard_is_missing_by_partition(damaged: tuple[Path, Path]):
    prompts, output = damaged
    gone = _shards(output, 1)[0]
    ids = [json.loads(l)["id"] for l in gone.read_text().splitlines()]
    gone.unlink()
    proc = verify(prompts, output)
    assert proc.returncode == 1
    assert f"missing:           {len(ids)}" in proc.stdout
    assert f"partition 1: {len(ids)} (e.g. {', '.join(sorted(ids)[:5])})" in proc.stdout
    assert f"{gone.relative_to(output).as_posix()}: recorded as uploaded, but not there" in proc.stdout


def test_a_line_copied_into_another_shard_is_a_duplicate_and_a_checksum_mismatch(
        damaged: tuple[Path, Path]):
    prompts, output = damaged
    a, b = _shards(output, 0)[:2]
    line = a.read_text().splitlines()[0]
    with open(b, "a") as f:
        f.write(line + "\n")
    proc = verify(prompts, output)
    assert proc.returncode == 1
    dup_id = json.loads(line)["id"]
    assert f"duplicated:        1 (e.g. {dup_id} (2x:" in proc.stdout
    assert "shards not matching their recorded checksum: 1" in proc.stdout
    assert b.relative_to(output).as_posix() + ": " in proc.stdout


def test_unparseable_and_truncated_lines_are_counted_with_their_place(damaged: tuple[Path, Path]):
    prompts, output = damaged
    shard = _shards(output, 2)[-1]
    data = shard.read_bytes()
    shard.write_bytes(data + b"{not json\n" + data.splitlines()[0][:50])
    proc = verify(prompts, output)
    assert proc.returncode == 1
    assert "unparseable lines: 2" in proc.stdout
    key = shard.relative_to(output).as_posix()
    n = len(data.splitlines())
    assert f"{key}:{n + 1}: not JSON" in proc.stdout
    assert f"{key}:{n + 2}: last line has no newline" in proc.stdout


def test_one_flipped_byte_is_a_checksum_mismatch_even_when_every_line_parses(
        damaged: tuple[Path, Path]):
    prompts, output = damaged
    shard = _shards(output, 1)[-1]
    data = bytearray(shard.read_bytes())
    i = data.index(b'"content":"') + len(b'"content":"')
    data[i] = ord("X") if data[i] != ord("X") else ord("Y")
    shard.write_bytes(bytes(data))
    proc = verify(prompts, output)
    assert proc.returncode == 1
    assert "unparseable lines: 0" in proc.stdout and "duplicated:        0" in proc.stdout
    assert f"{shard.relative_to(output).as_posix()}: {len(data)} bytes with sha256" in proc.stdout


def test_a_shard_under_the_wrong_partition_is_reported(damaged: tuple[Path, Path]):
    prompts, output = damaged
    src = _shards(output, 0)[0]
    dst = output / "part-0002-of-0003" / "shard-000099.jsonl"
    shutil.move(src, dst)
    proc = verify(prompts, output)
    assert proc.returncode == 1
    wrong = [json.loads(l)["id"] for l in dst.read_text().splitlines()]
    assert all(partition_of(i, 3) == 0 for i in wrong)
    assert f"in the wrong partition: {len(wrong)}" in proc.stdout


def test_another_prompt_file_is_named_and_its_extra_prompts_missing(
        finished_job: tuple[Path, Path], tmp_path: Path):
    prompts, output = finished_job
    changed = tmp_path / "prompts.jsonl"
    changed.write_text(prompts.read_text() + json.dumps({"id": "extra", "prompt": "new"}) + "\n")
    proc = verify(changed, output)
    assert proc.returncode == 1
    assert "was generated from another prompt file (prompts.jsonl" in proc.stdout
    assert "missing:           1" in proc.stdout and "extra" in proc.stdout


def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, finished_job: tuple[Path, Path]):
    prompts, output = finished_job
    for args in (("--prompts", str(tmp_path / "nope.jsonl"), "--output", str(output)),
                 ("--prompts", str(prompts), "--output", str(tmp_path / "nowhere"))):
        proc = subprocess.run([sys.executable, "-m", "supervisor", "verify", *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr


def test_nodes_that_backed_up_but_uploaded_nothing_still_count_as_partitions(
        damaged: tuple[Path, Path]):
    prompts, output = damaged
    for part in range(3):
        for shard in _shards(output, part):
            shard.unlink()
    proc = verify(prompts, output)
    assert proc.returncode == 1
    assert "(3 partitions)" in proc.stdout
    assert f"missing:           {N_PROMPTS}" in proc.stdout
    for part in range(3):
        expected = sum(partition_of(f"q{i:04d}", 3) == part for i in range(N_PROMPTS))
        assert f"partition {part}: {expected} (e.g." in proc.stdout
