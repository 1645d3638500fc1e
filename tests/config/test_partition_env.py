"""`job.partition = "auto"`: the index and count come from a Slurm array or a Kubernetes
Indexed Job, and anything else is one clear refusal naming what was looked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.config import ConfigError, Partition, load_config, parse_config
from supervisor.config.partition_env import PartitionEnvError, resolve

AUTO = {"servers": {"count": 1, "model_path": "/m"}, "job": {"partition": "auto"},
        "generation": {"enable_thinking": False}}


def _slurm(task: int, count: int, low: int = 0, step: int | None = None) -> dict[str, str]:
    env = {"SLURM_JOB_ID": "77", "SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": str(task),
           "SLURM_ARRAY_TASK_COUNT": str(count), "SLURM_ARRAY_TASK_MIN": str(low),
           "SLURM_ARRAY_TASK_MAX": str(low + (count - 1) * (step or 1))}
    if step is not None:
        env["SLURM_ARRAY_TASK_STEP"] = str(step)
    return env


@pytest.mark.parametrize("env, expected", [
    (_slurm(0, 4), (0, 4)),
    (_slurm(3, 4), (3, 4)),
    (_slurm(5, 8, low=1), (4, 8)),            # --array=1-8: positions, not raw ids
    (_slurm(14, 8, low=0, step=2), (7, 8)),   # --array=0-14:2
])
def test_slurm_array_positions(env, expected):
    found = resolve(env)
    assert (found.index, found.count) == expected
    assert "slurm array task" in found.source


def test_slurm_array_with_gaps_is_refused():
    # --array=1,5,9: count 3, min 1, but task 9 is not position 8 of anything.
    with pytest.raises(PartitionEnvError, match="contiguous"):
        resolve(_slurm(9, 3, low=1))


def test_slurm_job_that_is_not_an_array_is_refused():
    with pytest.raises(PartitionEnvError, match="not an array job"):
        resolve({"SLURM_JOB_ID": "77"})


def test_kubernetes_count_from_config_wins_over_env():
    env = {"JOB_COMPLETION_INDEX": "2", "DFLASH_PARTITION_COUNT": "9"}
    assert (resolve(env, 3).index, resolve(env, 3).count) == (2, 3)
    assert resolve(env).count == 9


@pytest.mark.parametrize("env, configured, message", [
    ({"JOB_COMPLETION_INDEX": "1"}, 0, "no node count"),
    ({"JOB_COMPLETION_INDEX": "3"}, 3, r"not within 0\.\.2"),
    ({"JOB_COMPLETION_INDEX": "x"}, 3, "not an integer"),
    ({}, 0, "neither a Slurm array job"),
])
def test_kubernetes_and_nothing_refused(env, configured, message):
    with pytest.raises(PartitionEnvError, match=message):
        resolve(env, configured)


def test_config_auto_resolves_from_the_given_environment(tmp_path: Path):
    cfg = parse_config(AUTO, base_dir=tmp_path, env=_slurm(2, 3))
    assert cfg.job.partition == Partition(2, 3)
    data = {**AUTO, "job": {"partition": "auto", "partition_count": 5}}
    cfg = parse_config(data, base_dir=tmp_path, env={"JOB_COMPLETION_INDEX": "4"})
    assert cfg.job.partition == Partition(4, 5)


def test_config_auto_without_a_scheduler_names_the_key(tmp_path: Path):
    with pytest.raises(ConfigError, match=r'^job.partition = "auto": neither a Slurm'):
        parse_config(AUTO, base_dir=tmp_path, env={})


def test_run_refuses_auto_outside_a_scheduler_with_one_line(tmp_path: Path):
    config = tmp_path / "job.toml"
    config.write_text('[job]\npartition = "auto"\n[servers]\ncount = 1\nmodel_path = "/m"\n')
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith(("SLURM_", "JOB_COMPLETION_INDEX", "DFLASH_PARTITION"))}
    proc = subprocess.run([sys.executable, "-m", "supervisor", "run", "--config", str(config)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "job.partition" in lines[0] and "Traceback" not in proc.stderr


def test_workdir_is_the_base_of_relative_paths(tmp_path: Path):
    config = tmp_path / "shared" / "job.toml"
    config.parent.mkdir()
    config.write_text('[job]\nstate = "job.db"\n[generation]\nenable_thinking = false\n'
                      '[servers]\ncount = 1\nmodel_path = "/m"\n')
    node = tmp_path / "node-1"
    cfg = load_config(config, workdir=node)
    assert cfg.path(cfg.job.state) == node.resolve() / "job.db"
    assert load_config(config).path("job.db") == config.parent.resolve() / "job.db"
