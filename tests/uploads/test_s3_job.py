"""Whole jobs into S3, end to end: `dflash-supervisor demo --output s3://…` as a real process,
simulated SGLang servers, moto's S3 server on loopback (behind a fault proxy where a test
needs one), and the bucket read back afterwards."""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.fixtures.moto_s3 import objects, s3_env
from tests.fixtures.state_db import read_db

pytestmark = pytest.mark.slow


def demo_argv(directory: Path, output: str, endpoint: str, prompts: int) -> list[str]:
    return [sys.executable, "-m", "supervisor", "demo", "--dir", str(directory), "--quiet",
            "--instant", "--prompts", str(prompts), "--output", output,
            "--endpoint-url", endpoint]


def demo(directory: Path, output: str, endpoint: str, prompts: int,
         timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(demo_argv(directory, output, endpoint, prompts), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=s3_env())


def spawn(directory: Path, output: str, endpoint: str, prompts: int) -> subprocess.Popen:
    return subprocess.Popen(demo_argv(directory, output, endpoint, prompts),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=s3_env())


def query(directory: Path, sql: str) -> list[tuple]:
    return read_db(directory / "job.db", sql)


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except sqlite3.OperationalError:      # the DB not created yet
            pass
        time.sleep(0.05)
    pytest.fail(f"not within {timeout_s} s: {what}")


def expected_ids(n: int) -> list[str]:
    return [f"demo-{i:06d}" for i in range(n)]


def check_bucket(s3: Any, bucket: str, prefix: str, directory: Path, prompts: int) -> None:
    """Every shard the DB knows is in the bucket under its key, exactly once, holding the
    bytes the DB recorded; nothing else is there; every prompt is in exactly one line."""
    shards = query(directory, "select key, status, sha256, md5, etag, checksum from shards")
    assert shards and all(status == "uploaded" for _, status, *_ in shards), shards
    listed = objects(s3, bucket, prefix)
    assert sorted(listed) == sorted(prefix + key for key, *_ in shards)
    ids: list[str] = []
    for key, _, sha256, md5, etag, checksum in shards:
        body = s3.get_object(Bucket=bucket, Key=prefix + key)["Body"].read()
        assert hashlib.sha256(body).hexdigest() == sha256 and checksum == f"sha256:{sha256}"
        assert listed[prefix + key]["ETag"].strip('"') == etag
        assert hashlib.md5(body).hexdigest() == md5
        ids += [json.loads(line)["id"] for line in body.decode("utf-8").splitlines()]
    assert sorted(ids) == expected_ids(prompts)


def event_kinds(directory: Path) -> list[str]:
    return [k for (k,) in query(directory, "select kind from events order by id")]


def test_a_job_uploads_every_shard_and_a_rerun_uploads_nothing_again(tmp_path, moto, s3, bucket):
    d = tmp_path / "demo"
    run = demo(d, f"s3://{bucket}/run1/", moto.url, 1200)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 shards verified" in run.stdout and "0 waiting; ok" in run.stdout
    check_bucket(s3, bucket, "run1/", d, 1200)
    assert not list((d / "spool").rglob("*.jsonl"))           # deleted once verified
    # The demo's 6 MB shards go multipart, the 200-line last one does not.
    etags = sorted(e for (e,) in query(d, "select etag from shards"))
    assert sum(e.endswith("-2") for e in etags) == 2 and sum("-" not in e for e in etags) == 1
    before = {k: o["LastModified"] for k, o in objects(s3, bucket, "run1/").items()}

    again = demo(d, f"s3://{bucket}/run1/", moto.url, 1200)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 completions checked" in again.stdout
    assert {k: o["LastModified"] for k, o in objects(s3, bucket, "run1/").items()} == before


def test_s3_going_away_mid_run_grows_the_backlog_which_drains_when_it_returns(
        tmp_path, moto, s3, bucket, fault_proxy):
    d = tmp_path / "demo"
    proxy = fault_proxy()
    proc = spawn(d, f"s3://{bucket}/outage/", proxy.url, 2500)
    try:
        wait_for(lambda: objects(s3, bucket, "outage/"), "a first shard uploaded")
        proxy.stop()                                    # connections refused from now on
        wait_for(lambda: query(d, "select count(*) from shards where status = 'written' "
                                  "and upload_attempts > 0")[0][0] >= 2,
                 "two shards waiting after failed uploads")
        backlog = query(d, "select count(*) from shards where status != 'uploaded'")[0][0]
        assert backlog >= 2
        assert "uploads_failing" in event_kinds(d)
        proxy.start()
        assert proc.wait(timeout=150) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check_bucket(s3, bucket, "outage/", d, 2500)
    assert "uploads_recovered" in event_kinds(d)
    assert query(d, "select count(*) from shards where last_error is not null") == [(0,)]


def test_a_daemon_killed_during_uploads_leaves_every_shard_once_after_restart(
        tmp_path, moto, s3, bucket, fault_proxy):
    d = tmp_path / "demo"
    proxy = fault_proxy()
    proxy.delay_s = 0.5                                 # uploads slow enough to be caught
    proc = spawn(d, f"s3://{bucket}/killed/", proxy.url, 2000)
    try:
        wait_for(lambda: objects(s3, bucket, "killed/") and proxy.active_puts > 0,
                 "an upload in flight after a first one landed")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    waiting = query(d, "select count(*) from shards where status != 'uploaded'")[0][0]
    assert waiting >= 1, "the kill should have left at least one shard not uploaded"

    again = demo(d, f"s3://{bucket}/killed/", moto.url, 2000)
    assert again.returncode == 0, again.stdout + again.stderr
    check_bucket(s3, bucket, "killed/", d, 2000)
    assert not list((d / "spool").rglob("*.jsonl"))


def test_bytes_altered_on_the_way_are_caught_and_uploaded_again(tmp_path, moto, s3, bucket,
                                                                fault_proxy):
    d = tmp_path / "demo"
    proxy = fault_proxy()
    proxy.corrupt_puts = 2              # the first two PUTs (a part or a whole shard)
    run = demo(d, f"s3://{bucket}/altered/", proxy.url, 1200)
    assert run.returncode == 0, run.stdout + run.stderr
    assert proxy.corrupted == 2
    check_bucket(s3, bucket, "altered/", d, 1200)
    assert event_kinds(d).count("upload_corrupt") == 2
    assert query(d, "select sum(upload_attempts) from shards") == [(2,)]


def test_a_missing_bucket_stops_uploads_but_not_generation(tmp_path, moto):
    d = tmp_path / "demo"
    run = demo(d, "s3://bucket-nobody-made/x/", moto.url, 600)
    assert run.returncode == 0, run.stdout + run.stderr          # the job itself finished
    assert "STOPPED" in run.stdout and "NoSuchBucket" in run.stdout
    assert "NoSuchBucket" in run.stderr                          # the operator is told
    assert query(d, "select count(*) from prompts where status = 'done'") == [(600,)]
    assert query(d, "select status, count(*) from shards group by 1") == [("written", 2)]
    assert len(list((d / "spool").glob("*.jsonl"))) == 2          # waiting for a fix
    [(detail,)] = query(d, "select detail from events where kind = 'uploads_stopped'")
    assert "NoSuchBucket" in json.loads(detail)["reason"]
