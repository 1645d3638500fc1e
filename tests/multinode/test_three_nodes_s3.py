"""Three daemons as three nodes of one job (partitions 0..2 of one prompt file from a Slurm
array's environment, simulated servers, one moto S3 server): the whole job verifies clean;
a node lost with its disk is replaced from its S3 backup and nothing it had uploaded is
generated again; a changed prompt file and a foreign backup are refused."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.moto_s3 import MotoServer, objects, s3_env
from tests.fixtures.multinode_nodes import Node, prompts_file, slurm_env, wait_for
from tests.fixtures.node_config import node_config

pytestmark = pytest.mark.slow

N_PROMPTS = 300
# Node 1 of the replacement test generates slowly, so it is lost half-way.
SLOW = {"sim-instant": "false", "sim-tokens-per-s": "60", "sim-time-scale": "20"}


def make_nodes(root: Path, prompts: Path, output: str, moto: MotoServer,
               overrides: dict[int, dict[str, Any]] | None = None) -> list[Node]:
    nodes = []
    for i in range(3):
        kwargs = {"shard_size": 10, "backup_interval_s": 3.0, **(overrides or {}).get(i, {})}
        cfg = node_config(root / f"job-{i}.toml", prompts=prompts, output=output,
                          endpoint_url=moto.url, **kwargs)
        nodes.append(Node(i, cfg, root / f"node{i}"))
    return nodes


def verify(prompts: Path, output: str, moto: MotoServer) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "supervisor", "verify", "--prompts",
                           str(prompts), "--output", output, "--endpoint-url", moto.url],
                          capture_output=True, text=True, timeout=120, env=s3_env())


def shard_digests(s3: Any, bucket: str, part: str) -> dict[str, str]:
    return {key: hashlib.sha256(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).hexdigest()
            for key in objects(s3, bucket, part) if "/shard-" in key}


def manifest(s3: Any, bucket: str, key: str) -> dict:
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def run_all(nodes: list[Node]) -> None:
    try:
        for node in nodes:
            node.start(slurm_env(s3_env(), node.index, 3))
        for node in nodes:
            assert node.wait(180) == 0, node.log_tail()
    finally:
        for node in nodes:
            node.stop()


# Each node waits up to 180 s (run_all); the test's own limit is above that, so a node that
# is slow on a loaded CI machine fails with its log, not a bare pytest timeout.
@pytest.mark.timeout(300)
def test_three_nodes_finish_and_the_whole_job_verifies(tmp_path: Path, moto: MotoServer,
                                                       s3: Any, bucket: str):
    prompts = prompts_file(tmp_path / "prompts.jsonl")
    output = f"s3://{bucket}/run/"
    run_all(make_nodes(tmp_path, prompts, output, moto))
    listed = objects(s3, bucket, "run/")
    for i in range(3):
        m = manifest(s3, bucket, f"run/part-{i:04d}-of-0003/_state/backup.json")
        assert m["partition"] == f"{i}/3" and m["done"] == m["total"] > 0
        assert {f"run/part-{i:04d}-of-0003/_state/chunks/{c}" for c in m["chunks"]} <= set(listed)
        assert {s["key"] for s in m["shards"]} == {
            k[len("run/"):] for k in listed if k.startswith(f"run/part-{i:04d}") and "/shard-" in k}
    proc = verify(prompts, output, moto)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{N_PROMPTS} in the file, {N_PROMPTS} present exactly once" in proc.stdout


@pytest.mark.timeout(300)
def test_a_lost_node_is_replaced_from_its_backup_without_regenerating_uploads(
        tmp_path: Path, moto: MotoServer, s3: Any, bucket: str):
    prompts = prompts_file(tmp_path / "prompts.jsonl")
    output = f"s3://{bucket}/run/"
    nodes = make_nodes(tmp_path, prompts, output, moto, {1: {"sim_flags": SLOW}})
    lost = nodes[1]
    backup_key = "run/part-0001-of-0003/_state/backup.json"
    try:
        for node in nodes:
            node.start(slurm_env(s3_env(), node.index, 3))

        def uploaded_past_backup() -> bool:
            backed_up = len(manifest(s3, bucket, backup_key)["shards"])
            (uploaded,) = lost.query("select count(*) from shards where status='uploaded'")[0]
            return backed_up >= 1 and uploaded >= backed_up + 1

        wait_for(uploaded_past_backup, "node 1 uploads shards past a backup that has some")
        lost.kill_hard()
        lost_at = time.time()
        for node in (nodes[0], nodes[2]):
            assert node.wait(180) == 0, node.log_tail()
    finally:
        for node in nodes:
            node.stop()

    (done_at_loss,) = lost.query("select count(*) from prompts where status='done'")[0]
    total = lost.query("select count(*) from prompts")[0][0]
    assert done_at_loss < total, "node 1 finished before it could be lost"
    backed_up = {s["key"] for s in manifest(s3, bucket, backup_key)["shards"]}
    before = shard_digests(s3, bucket, "run/part-0001-of-0003/")
    assert len(before) > len(backed_up) >= 1   # some uploads are only in the output
    # The node's disk is gone; a new node (new work directory, its own port, servers at full
    # speed) takes partition 1.
    shutil.rmtree(lost.workdir)
    replacement = node_config(tmp_path / "job-1-replacement.toml", prompts=prompts,
                              output=output, endpoint_url=moto.url, shard_size=10,
                              backup_interval_s=3.0)
    new = Node(1, replacement, tmp_path / "node1-replacement")
    try:
        new.start(slurm_env(s3_env(), 1, 3))
        assert new.wait(180) == 0, new.log_tail()
    finally:
        new.stop()
    log = new.log.read_text()
    assert "restored the state DB of partition 1/3" in log
    after = shard_digests(s3, bucket, "run/part-0001-of-0003/")
    assert {k: after[k] for k in before} == before       # nothing uploaded was redone
    assert len(after) >= len(before)
    (event,) = new.query("select json_extract(detail, '$.shards_taken_back') from events "
                         "where kind = 'state_restored'")
    assert sorted(json.loads(event[0])) == sorted(k[len("run/"):] for k in before
                                                  if k[len("run/"):] not in backed_up)
    # Every prompt of a shard uploaded before the loss kept the answer it had then.
    (redone,) = new.query(
        "select count(*) from prompts p join shards s on s.id = p.shard_id "
        f"where s.key in ({', '.join(repr(k[len('run/'):]) for k in before)}) "
        f"and p.finished_at > {lost_at}")[0]
    assert redone == 0
    proc = verify(prompts, output, moto)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_prompt_file_changed_between_nodes_is_refused(tmp_path: Path, moto: MotoServer,
                                                        bucket: str):
    prompts = prompts_file(tmp_path / "prompts.jsonl")
    (tmp_path / "other").mkdir()
    edited = prompts_file(tmp_path / "other" / "prompts.jsonl", changed=7)
    output = f"s3://{bucket}/run/"
    first, second, _ = make_nodes(tmp_path, prompts, output, moto)
    try:
        first.start(slurm_env(s3_env(), 0, 3))
        assert first.wait(180) == 0, first.log_tail()
    finally:
        first.stop()
    second.config = node_config(tmp_path / "job-1-edited.toml", prompts=edited, output=output,
                                endpoint_url=moto.url)
    proc = subprocess.run([sys.executable, "-m", "supervisor", "run", "--config",
                           str(second.config), "--workdir", str(second.workdir)],
                          capture_output=True, text=True, timeout=120,
                          env=slurm_env(s3_env(), 1, 3))
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert "is not the prompt file partition 0/3 runs" in line and "Traceback" not in proc.stderr
    assert not (second.workdir / "job.db").exists()


def test_a_backup_of_another_partition_or_prompt_file_is_not_restored(
        tmp_path: Path, moto: MotoServer, s3: Any, bucket: str):
    """The restore checks whose backup it is, not only where it was found."""
    prompts = prompts_file(tmp_path / "prompts.jsonl")
    output = f"s3://{bucket}/run/"
    node0 = make_nodes(tmp_path, prompts, output, moto)[0]
    try:
        node0.start(slurm_env(s3_env(), 0, 3))
        assert node0.wait(180) == 0, node0.log_tail()
    finally:
        node0.stop()
    # An operator copies partition 0's backup to where partition 1's would be, in a prefix
    # of its own (so no sibling check stands in the way).
    for key in objects(s3, bucket, "run/part-0000-of-0003/_state/"):
        s3.copy_object(Bucket=bucket, CopySource={"Bucket": bucket, "Key": key},
                       Key=key.replace("run/part-0000-of-0003", "copy/part-0001-of-0003"))
    cfg = node_config(tmp_path / "job-copy.toml", prompts=prompts, output=f"s3://{bucket}/copy/",
                      endpoint_url=moto.url)
    proc = subprocess.run([sys.executable, "-m", "supervisor", "run", "--config", str(cfg),
                           "--workdir", str(tmp_path / "copy-node")], capture_output=True,
                          text=True, timeout=120, env=slurm_env(s3_env(), 1, 3))
    assert proc.returncode == 2
    assert "is a backup of partition 0/3, this node runs 1/3" in proc.stderr.strip().splitlines()[-1]
    # Its own partition's backup, but the node now has another prompt file.
    edited = prompts_file(tmp_path / "edited.jsonl", changed=3)
    cfg = node_config(tmp_path / "job-edited.toml", prompts=edited, output=output,
                      endpoint_url=moto.url)
    proc = subprocess.run([sys.executable, "-m", "supervisor", "run", "--config", str(cfg),
                           "--workdir", str(tmp_path / "edited-node")], capture_output=True,
                          text=True, timeout=120, env=slurm_env(s3_env(), 0, 3))
    assert proc.returncode == 2
    assert "was made from another prompt file" in proc.stderr.strip().splitlines()[-1]
