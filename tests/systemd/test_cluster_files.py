"""The Slurm array script and the Kubernetes Indexed Job manifest: each is checked for what the
daemon reads from it, and the sbatch script is run for real as one array task."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from supervisor.config import Partition, parse_config
from supervisor.config.listen_address import parse_listen
from supervisor.prompts.prompt_import import partition_of
from tests.fixtures import REPO
from tests.fixtures.node_config import node_config
from tests.fixtures.ports import free_port
from tests.fixtures.real_prompts import write_jsonl

SBATCH = REPO / "systemd" / "slurm" / "dflash-supervisor.sbatch"
MANIFEST = REPO / "systemd" / "k8s" / "indexed-job.yaml"


def _directives(script: str) -> dict[str, str]:
    out = {}
    for line in script.splitlines():
        m = re.match(r"#SBATCH\s+--([\w-]+)(?:=(\S+))?", line)
        if m:
            out[m.group(1)] = m.group(2) or ""
    return out


def test_sbatch_script_is_valid_bash_and_asks_for_what_the_daemon_needs():
    subprocess.run(["bash", "-n", str(SBATCH)], check=True, timeout=30)
    text = SBATCH.read_text()
    d = _directives(text)
    assert re.fullmatch(r"\d+-\d+", d["array"])            # a contiguous array: positions = ids
    assert d["gres"].startswith("gpu:")
    assert re.fullmatch(r"B:TERM@\d+", d["signal"])        # SIGTERM to the (exec'd) daemon
    assert "requeue" in d and "exclusive" in d
    # The metrics listener is on for every node unless exported otherwise (empty: off).
    assert 'DFLASH_METRICS_LISTEN="${DFLASH_METRICS_LISTEN-0.0.0.0:9464}"' in text
    assert re.search(r"^export .*\bDFLASH_METRICS_LISTEN\b", text, re.M)
    run_line = [l for l in text.splitlines() if l.startswith("exec ")]
    assert run_line == ['exec "$DFLASH_BIN" run --config "$DFLASH_CONFIG" --workdir "$DFLASH_WORKDIR"']


@pytest.mark.slow
def test_sbatch_script_runs_one_array_task_of_a_real_job(tmp_path: Path):
    """As Slurm would run task 1 of --array=0-2: the daemon takes partition 1/3 from the
    environment, keeps its state in the node-local workdir and writes only its part."""
    prompts = write_jsonl(tmp_path / "prompts.jsonl",
                          [{"id": f"p{i:03d}", "prompt": f"question {i}"} for i in range(60)])
    output = tmp_path / "shared-output"
    config = node_config(tmp_path / "shared" / "job.toml", prompts=prompts, output=str(output),
                         backup_interval_s=0)
    bindir = Path(sys.executable).parent
    metrics_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update({"SLURM_JOB_ID": "1001", "SLURM_ARRAY_JOB_ID": "1000", "SLURM_ARRAY_TASK_ID": "1",
                "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "0",
                "SLURM_ARRAY_TASK_MAX": "2", "TMPDIR": str(tmp_path / "node-local"),
                "DFLASH_CONFIG": str(config), "DFLASH_BIN": str(bindir / "dflash-supervisor"),
                "DFLASH_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
                "PATH": f"{bindir}:{env.get('PATH', '')}"})
    (tmp_path / "node-local").mkdir()
    proc = subprocess.run(["bash", str(SBATCH)], env=env, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"metrics listener: http://127.0.0.1:{metrics_port}/metrics" in proc.stdout + proc.stderr
    workdir = tmp_path / "node-local" / "dflash-1000-1"
    assert (workdir / "job.db").is_file() and (workdir / "logs").is_dir()
    shards = sorted((output / "part-0001-of-0003").glob("shard-*.jsonl"))
    ids = [json.loads(l)["id"] for s in shards for l in s.read_text().splitlines()]
    expected = sorted(f"p{i:03d}" for i in range(60) if partition_of(f"p{i:03d}", 3) == 1)
    assert sorted(ids) == expected and expected
    assert [p.name for p in output.iterdir()] == ["part-0001-of-0003"]


def _manifest() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    return {d["kind"]: d for d in docs}


def test_indexed_job_manifest_names_what_the_daemon_reads():
    docs = _manifest()
    job = docs["Job"]["spec"]
    assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"]
    pod = job["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["DFLASH_PARTITION_COUNT"]["value"] == str(job["completions"])
    assert "job-completion-index" in env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert int(c["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert any("secretRef" in e for e in c["envFrom"])
    config_path = Path(c["command"][c["command"].index("--config") + 1])
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_mount = mounts[str(config_path.parent)]
    cm_name = volumes[config_mount["name"]]["configMap"]["name"]
    assert docs["ConfigMap"]["metadata"]["name"] == cm_name

    # The config the pod reads, resolved the way the daemon resolves it in pod 2.
    import tomllib
    raw = tomllib.loads(docs["ConfigMap"]["data"][config_path.name])
    cfg = parse_config(raw, env={"JOB_COMPLETION_INDEX": "2",
                                 "DFLASH_PARTITION_COUNT": env["DFLASH_PARTITION_COUNT"]["value"]})
    assert cfg.job.partition == Partition(2, job["completions"])
    assert cfg.output_is_s3 and cfg.backups_enabled

    def mount_of(path: str) -> dict:
        best = max((m for m in mounts if path.startswith(m.rstrip("/") + "/")), key=len)
        return mounts[best]

    state = mount_of(cfg.job.state)
    assert volumes[state["name"]].get("persistentVolumeClaim")
    assert "$(JOB_COMPLETION_INDEX)" in state["subPathExpr"]   # one directory per index
    for path in (cfg.uploads.spool_dir, cfg.servers.log_dir):
        assert mount_of(path) is state
    assert mount_of(cfg.job.prompts)["readOnly"] is True
    assert mount_of(cfg.control.socket)["name"] in volumes
    grace = pod["terminationGracePeriodSeconds"]
    assert grace >= cfg.servers.stop_grace_s + cfg.servers.drain_timeout_s + 60
    assert pod["restartPolicy"] == "Never" and job["backoffLimitPerIndex"] >= 1


def test_manifest_exit_2_fails_the_index_instead_of_retrying():
    rules = _manifest()["Job"]["spec"]["podFailurePolicy"]["rules"]
    assert any(r["action"] == "FailIndex" and 2 in r["onExitCodes"]["values"] for r in rules)


def test_manifest_serves_metrics_on_a_named_port_prometheus_finds():
    import tomllib
    docs = _manifest()
    template = docs["Job"]["spec"]["template"]
    (c,) = template["spec"]["containers"]
    raw = tomllib.loads(docs["ConfigMap"]["data"]["job.toml"])
    cfg = parse_config(raw, env={"JOB_COMPLETION_INDEX": "0", "DFLASH_PARTITION_COUNT": "4"})
    address = parse_listen(cfg.control.metrics_listen)
    assert address.host == "0.0.0.0"         # reachable from the cluster's Prometheus
    [port] = [p for p in c["ports"] if p["name"] == "metrics"]
    assert port["containerPort"] == address.port
    notes = template["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert int(notes["prometheus.io/port"]) == address.port
    assert notes["prometheus.io/path"] == "/metrics"
    # The Prometheus Operator's PodMonitor, commented out at the end (it needs the CRDs).
    text = MANIFEST.read_text()
    block = text[text.index("# apiVersion: monitoring.coreos.com/v1"):]
    monitor = yaml.safe_load("\n".join(line[2:] for line in block.splitlines()))
    assert monitor["kind"] == "PodMonitor"
    assert monitor["spec"]["selector"]["matchLabels"] == template["metadata"]["labels"]
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True
