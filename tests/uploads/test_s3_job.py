"""Whole jobs into S3, end to end: `dflash-supervisor demo --output s3://…` as a real process,
simulated SGLang servers, moto's S3 server on loopback (behind a fault proxy where a test
needs one), and the bucket read back afterwards."""

from __future__ import annotations

import json
import signal

import pytest

from tests.fixtures.moto_s3 import objects
from tests.fixtures.s3_demo import check_bucket, demo, event_kinds, query, spawn, wait_for

pytestmark = pytest.mark.slow


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
    proc = spawn(d, f"s3://{bucket}/outage/", proxy.url, 2000)      # four shards
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
    check_bucket(s3, bucket, "outage/", d, 2000)
    assert "uploads_recovered" in event_kinds(d)
    assert query(d, "select count(*) from shards where last_error is not null") == [(0,)]


def test_a_daemon_killed_during_uploads_leaves_every_shard_once_after_restart(
        tmp_path, moto, s3, bucket, fault_proxy):
    d = tmp_path / "demo"
    proxy = fault_proxy()
    # One shard lands; the others' last requests wait in the proxy, in flight, for the kill.
    # (Timing it instead, with slow uploads, lost the race on a loaded machine: the whole
    # instant job had uploaded and exited before a poll saw an upload in flight.)
    proxy.land_at_most = 1
    proc = spawn(d, f"s3://{bucket}/killed/", proxy.url, 1200)      # 500 + 500 + 200
    try:
        wait_for(lambda: objects(s3, bucket, "killed/") and proxy.held > 0,
                 "an upload in flight after a first one landed")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        # The held requests now reach the store from a dead daemon, as bytes already sent
        # would: an object may land that the state DB never heard of.
        proxy.release()
    waiting = query(d, "select count(*) from shards where status != 'uploaded'")[0][0]
    assert waiting >= 1, "the kill should have left at least one shard not uploaded"

    again = demo(d, f"s3://{bucket}/killed/", moto.url, 1200)
    assert again.returncode == 0, again.stdout + again.stderr
    check_bucket(s3, bucket, "killed/", d, 1200)
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
