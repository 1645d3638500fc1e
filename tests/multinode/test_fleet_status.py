"""`dflash-supervisor status` with one --socket per node, against three live daemons (and one
socket nobody answers on): a row per node with its partition, the job's total, exit 69 while
a node is unreachable, and the same as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.multinode_nodes import Node, wait_for
from tests.fixtures.node_config import node_config
from tests.fixtures.real_prompts import write_jsonl

pytestmark = pytest.mark.slow

SLOW = {"sim-instant": "false", "sim-tokens-per-s": "20", "sim-time-scale": "1"}


def status(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "supervisor", "status", *args],
                          capture_output=True, text=True, timeout=60)


def test_status_with_several_sockets_is_a_fleet_table(tmp_path: Path):
    prompts = write_jsonl(tmp_path / "prompts.jsonl",
                          [{"id": f"s{i:03d}", "prompt": f"q {i}"} for i in range(90)])
    nodes = [Node(i, node_config(tmp_path / f"n{i}.toml", prompts=prompts,
                                 output=str(tmp_path / "out"), partition=f"{i}/3",
                                 sim_flags=SLOW, backup_interval_s=0), tmp_path / f"node{i}")
             for i in range(3)]
    sockets = [str(n.workdir / "control.sock") for n in nodes]
    try:
        for node in nodes:
            node.start(dict(os.environ))
        wait_for(lambda: all(status("--socket", s, "--json").returncode == 0 for s in sockets),
                 "every node answers on its socket")
        proc = status(*(a for s in sockets for a in ("--socket", s)),
                      "--socket", str(tmp_path / "nobody.sock"))
        assert proc.returncode == 69, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0].split()[:3] == ["node", "part", "done"]
        for i, s in enumerate(sockets):
            (row,) = [l for l in lines if l.startswith(s)]
            assert row.split()[1] == f"{i}/3"
        assert "UNREACHABLE" in [l for l in lines if "nobody.sock" in l][0]
        assert "3/4 nodes answer, 3 of 3 partitions" in lines[-1]
        assert "ETA ? (unknown:" in lines[-1]
        proc = status(*(a for s in sockets for a in ("--socket", s)), "--json")
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)
        assert [n["status"]["partition"] for n in got["nodes"]] == ["0/3", "1/3", "2/3"]
        assert got["totals"]["total"] == 90 and got["totals"]["answering"] == 3
    finally:
        for node in nodes:
            node.stop()
