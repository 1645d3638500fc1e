"""Two nodes that started at the same moment with different prompt files both passed the
start check (neither had backed up yet): the first backup that sees the other's manifest
pauses dispatch with the reason, instead of letting the two split different files."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.moto_s3 import MotoServer, objects, s3_env
from tests.fixtures.multinode_nodes import Node, prompts_file, slurm_env, wait_for
from tests.fixtures.node_config import node_config

pytestmark = pytest.mark.slow

SLOW = {"sim-instant": "false", "sim-tokens-per-s": "20", "sim-time-scale": "1"}


def test_a_sibling_with_another_prompt_file_pauses_a_running_node(
        tmp_path: Path, moto: MotoServer, s3: Any, bucket: str):
    (tmp_path / "b").mkdir()
    mine = prompts_file(tmp_path / "prompts.jsonl")
    theirs = prompts_file(tmp_path / "b" / "prompts.jsonl", changed=11)
    # The other node's real state backup, made in a prefix of its own...
    other = Node(1, node_config(tmp_path / "other.toml", prompts=theirs,
                                output=f"s3://{bucket}/other/", endpoint_url=moto.url),
                 tmp_path / "other-node")
    try:
        assert other.start(slurm_env(s3_env(), 1, 3)).wait(120) == 0, other.log_tail()
    finally:
        other.stop()
    node = Node(0, node_config(tmp_path / "node0.toml", prompts=mine,
                               output=f"s3://{bucket}/run/", endpoint_url=moto.url,
                               sim_flags=SLOW, backup_interval_s=1.0), tmp_path / "node0")
    try:
        node.start(slurm_env(s3_env(), 0, 3))
        wait_for(lambda: "run/part-0000-of-0003/_state/backup.json" in objects(s3, bucket, "run/"),
                 "node 0's first backup")
        # ...arrives in the shared prefix while node 0 runs, as if it had started alongside.
        for key in objects(s3, bucket, "other/part-0001-of-0003/_state/"):
            s3.copy_object(Bucket=bucket, CopySource={"Bucket": bucket, "Key": key},
                           Key="run/" + key[len("other/"):])

        def paused() -> str | None:
            rows = node.query("select detail from events where kind = 'paused' "
                              "and subject = 'prompt-file'")
            return json.loads(rows[0][0])["reason"] if rows else None

        wait_for(lambda: paused() is not None, "node 0 pauses dispatch")
        assert "is not the prompt file partition 1/3 runs" in (paused() or "")
        assert node.proc is not None
        node.proc.send_signal(signal.SIGTERM)
        assert node.wait(60) == 0, node.log_tail()
    finally:
        node.stop()
