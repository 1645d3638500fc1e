"""A disk that fills up under a running job (a real 512 KiB tmpfs holding the state DB and the
shards, the disk guard off so nothing pauses first): the daemon stops with exit 5 and one line
naming the problem, no traceback, and a run on a disk with room finishes the job with every
prompt exactly once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.fs_faults import cli, tmpfs
from tests.fixtures.job_toml import write_job_toml

pytestmark = pytest.mark.slow


def test_a_full_disk_stops_the_job_in_one_line_and_loses_nothing(tmp_path: Path):
    mnt = tmp_path / "small"
    with tmpfs(mnt, size="512k"):
        toml = write_job_toml(tmp_path / "cfg", servers=2, prompts=600,
                              job={"state": str(mnt / "job.db"), "output": str(mnt / "shards")},
                              uploads={"min_free_bytes": 0})
        out = cli(["run", "--config", str(toml)], timeout=180)
        assert out.returncode == 5, out.stderr[-3000:]
        assert "Traceback" not in out.stderr, out.stderr[-3000:]
        last = out.stderr.strip().splitlines()[-1]
        assert last.startswith("dflash-supervisor: stopped: ") and "full" in last, last
        # Move the job to a disk with room and finish it.
        shutil.copytree(mnt, tmp_path / "big")
    text = toml.read_text().replace(str(mnt), str(tmp_path / "big"))
    toml.write_text(text)
    # The output holds the shard keys the DB knows (same files, moved together).
    out = cli(["run", "--config", str(toml)], timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    ids = [json.loads(line)["id"] for p in sorted((tmp_path / "big" / "shards").glob("*.jsonl"))
           for line in p.read_text().splitlines()]
    assert len(ids) == 600 and len(set(ids)) == 600
