"""Configs that cannot work are refused at load, naming the key: non-finite timings, max
tokens at or past the context length, port ranges that overlap or pass 65535, GPUs the node
does not have; a config path that is a directory or unreadable is one line, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.config import ConfigError, check_gpus_exist, load_config, parse_config
from supervisor.gpu.nvml_source import node_gpu_count
from tests.fixtures.fs_faults import assert_one_line, cli
from tests.gpu.fake_nvml import FakeNvml

BASE = {"servers": {"count": 2, "model_path": "/models/m"}}


def _with(section: str, **values) -> dict:
    data = {k: dict(v) for k, v in BASE.items()}
    data.setdefault(section, {}).update(values)
    return data


@pytest.mark.parametrize("data, fragment", [
    (_with("servers", startup_timeout_s=float("inf")), "servers.startup_timeout_s: must be a finite number"),
    (_with("servers", backoff_max_s=float("nan")), "servers.backoff_max_s: must be a finite number"),
    (_with("dispatch", request_timeout_s=float("-inf")), "dispatch.request_timeout_s: must be a finite"),
    (_with("uploads", retry_initial_s=float("nan")), "uploads.retry_initial_s: must be a finite"),
    (_with("servers", stop_grace_s=-1.0), "servers.stop_grace_s: must be > 0"),
    ({"servers": {**BASE["servers"], "flags": {"context-length": 4096}}},
     "generation.max_tokens: 4096 is at or past the servers' context-length 4096"),
    ({"servers": {**BASE["servers"], "flags": {"context-length": 2048}},
      "generation": {"max_tokens": 8192}}, "context-length 2048"),
    ({"servers": {**BASE["servers"], "flags": {"context-length": "2048"}}}, "context-length 2048"),
    ({"servers": {**BASE["servers"], "flags": {"context-length": "long"}}},
     "servers.flags.context-length: must be an integer >= 1"),
    ({"servers": {"count": 8, "model_path": "m", "base_port": 65530}},
     "servers.base_port: 8 servers need ports 65530..65537, past 65535"),
    ({"servers": {"count": 2, "model_path": "m", "base_port": 30000, "flags": {"nccl-port": 30001}}},
     "servers.flags.nccl-port: port 30001 overlaps the servers' ports 30000..30001"),
    ({"servers": {"count": 2, "model_path": "m", "flags": {"metrics-port": 70000}}},
     "servers.flags.metrics-port: must be a TCP port"),
    ({"servers": {"count": 2, "model_path": "m", "flags": {"nccl-port": 29500}}},
     "every one of the 2 servers would bind port 29500"),
])
def test_configs_that_cannot_work_are_refused(data, fragment):
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    assert fragment in str(exc.value)


def test_what_can_work_still_loads():
    cfg = parse_config({"servers": {"count": 1, "model_path": "m", "base_port": 65535,
                                    "flags": {"context-length": 8192, "nccl-port": 29500}},
                        "generation": {"max_tokens": 8191}})
    assert cfg.generation.max_tokens == 8191
    # 8 GPUs in 4 TP groups need 4 ports, not 8.
    parse_config({"servers": {"count": 8, "tp_size": 2, "model_path": "m", "base_port": 65532}})


def test_toml_nan_and_inf_in_a_file_are_refused(tmp_path: Path):
    path = tmp_path / "job.toml"
    path.write_text('[servers]\ncount = 1\nmodel_path = "m"\nhang_timeout_s = inf\n')
    with pytest.raises(ConfigError, match="servers.hang_timeout_s: must be a finite number"):
        load_config(path)
    path.write_text('[servers]\ncount = 1\nmodel_path = "m"\nhealth_interval_s = nan\n')
    out = cli(["check", "--config", str(path), "--skip-flag-check"])
    assert out.returncode == 2
    assert_one_line(out, "servers.health_interval_s: must be a finite number")


def test_gpu_indices_the_driver_does_not_see_are_refused():
    count = node_gpu_count(FakeNvml(count=2))
    assert count == 2
    check_gpus_exist(parse_config({"servers": {"gpus": [0, 1], "model_path": "m"}}), count)
    with pytest.raises(ConfigError, match=r"servers.gpus: GPU 2, 7 does not exist \(this node has 2: 0..1\)"):
        check_gpus_exist(parse_config({"servers": {"gpus": [0, 2, 7], "model_path": "m"}}), count)
    with pytest.raises(ConfigError, match="servers.count: GPU 2 does not exist"):
        check_gpus_exist(parse_config({"servers": {"count": 3, "model_path": "m"}}), count)
    # No driver: nothing to check. The simulator uses no GPU at all.
    assert node_gpu_count(FakeNvml(init_error=9)) is None
    check_gpus_exist(parse_config({"servers": {"count": 9, "model_path": "m"}}), None)
    sim = parse_config({"servers": {"count": 9, "model_path": "m",
                                    "command": ["python", "-m", "supervisor.sim"]}})
    check_gpus_exist(sim, 1)


def test_a_config_path_that_is_a_directory_or_unreadable_is_one_line(tmp_path: Path):
    out = cli(["run", "--config", str(tmp_path)])
    assert out.returncode == 2
    assert_one_line(out, f"{tmp_path}: is a directory, not a config file")
    cfg = tmp_path / "job.toml"
    cfg.write_text('[servers]\ncount = 1\nmodel_path = "m"\n')
    cfg.chmod(0o000)
    out = cli(["check", "--config", str(cfg), "--skip-flag-check"], no_file_override=True)
    assert out.returncode == 2
    assert_one_line(out, f"{cfg}: cannot read: Permission denied")
