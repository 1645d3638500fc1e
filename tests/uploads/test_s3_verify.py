"""The output is checked against the DB for S3 too (moto's server on loopback): an object
deleted, replaced or left there without the DB knowing it is found by `verify --state` (HEAD
size and ETag, `--read-back` for the bytes) and by the next start, which uploads the shards
again; a lost DB is rebuilt from the bucket with `rebuild-state`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO
from tests.fixtures.moto_s3 import objects, s3_env
from tests.fixtures.s3_demo import check_bucket, demo, query

pytestmark = pytest.mark.slow


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "supervisor", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=s3_env())


def test_objects_changed_in_the_bucket_are_found_and_uploaded_again(tmp_path, moto, s3, bucket):
    d = tmp_path / "demo"
    out = f"s3://{bucket}/v/"
    first = demo(d, out, moto.url, 600)
    assert first.returncode == 0, first.stdout + first.stderr
    state = str(d / "job.db")
    ok = _cli("verify", "--state", state, "--read-back")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    keys = sorted(objects(s3, bucket, "v/"))
    assert len(keys) == 2
    s3.delete_object(Bucket=bucket, Key=keys[0])
    s3.put_object(Bucket=bucket, Key=keys[1], Body=b'{"id": "not ours"}\n')
    s3.put_object(Bucket=bucket, Key="v/shard-000077.jsonl", Body=b"{}\n")
    bad = _cli("verify", "--state", state)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"s3://{bucket}/{keys[0]} is missing" in bad.stdout
    assert f"s3://{bucket}/{keys[1]} holds" in bad.stdout
    assert "shard-000077.jsonl: in the output, unknown to the DB" in bad.stdout
    assert "2 shards will be rewritten at the next start" in bad.stdout
    # A start refuses the unknown shard until someone removes it.
    refused = demo(d, out, moto.url, 600)
    assert refused.returncode == 2 and "shard-000077.jsonl" in refused.stderr
    s3.delete_object(Bucket=bucket, Key="v/shard-000077.jsonl")
    again = demo(d, out, moto.url, 600)
    assert again.returncode == 0, again.stdout + again.stderr
    check_bucket(s3, bucket, "v/", d, 600)
    assert query(d, "select count(*) from events where kind = 'shard_mismatch'") == [(2,)]


def test_a_lost_db_is_rebuilt_from_the_bucket(tmp_path, moto, s3, bucket):
    d = tmp_path / "demo"
    out = f"s3://{bucket}/r/"
    assert demo(d, out, moto.url, 600).returncode == 0
    before = query(d, "select id, content, finished_at, shard_id from prompts order by id")
    for suffix in ("", "-wal", "-shm"):
        Path(str(d / "job.db") + suffix).unlink(missing_ok=True)
    rebuilt = _cli("rebuild-state", "--config", str(d / "demo.toml"))
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert "2 shards, 600 lines" in rebuilt.stdout and "600 done, 0 pending" in rebuilt.stdout
    assert query(d, "select id, content, finished_at, shard_id from prompts order by id") == before
    assert _cli("verify", "--state", str(d / "job.db")).returncode == 0
