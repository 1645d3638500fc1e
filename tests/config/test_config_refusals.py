"""Configs that cannot work are refused at load, naming the key: non-finite timings, max
tokens at or past the context length, port ranges that overlap or pass 65535, GPUs the node
does not have; a config path that is a directory or unreadable is one line, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.config import (
    ConfigError,
    check_gpus_exist,
    load_config,
    load_warnings,
    parse_config,
    with_flags,
)
from supervisor.gpu.nvml_source import node_gpu_count
from tests.fixtures.fs_faults import assert_one_line, cli
from tests.gpu.fake_nvml import FakeNvml

BASE = {"servers": {"count": 2, "model_path": "/models/m"},
        "generation": {"enable_thinking": False}}


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
                                    "flags": {"context-length": 8192, "nccl-port": 29500,
                                              "reasoning-parser": "qwen3"}},
                        "generation": {"max_tokens": 8191}})
    assert cfg.generation.max_tokens == 8191
    # 8 GPUs in 4 TP groups need 4 ports, not 8.
    parse_config({"servers": {"count": 8, "tp_size": 2, "model_path": "m", "base_port": 65532},
                  "generation": {"enable_thinking": False}})


def test_toml_nan_and_inf_in_a_file_are_refused(tmp_path: Path):
    path = tmp_path / "job.toml"
    path.write_text('[servers]\ncount = 1\nmodel_path = "m"\nhang_timeout_s = inf\n')
    with pytest.raises(ConfigError, match="servers.hang_timeout_s: must be a finite number"):
        load_config(path)
    path.write_text('[servers]\ncount = 1\nmodel_path = "m"\nhealth_interval_s = nan\n')
    out = cli(["check", "--config", str(path), "--skip-flag-check"])
    assert out.returncode == 2
    assert_one_line(out, "servers.health_interval_s: must be a finite number")


def _servers_only(servers: dict):
    """A config with these servers and thinking off (thinking on needs a reasoning parser)."""
    return parse_config({"servers": servers, "generation": {"enable_thinking": False}})


def test_gpu_indices_the_driver_does_not_see_are_refused():
    count = node_gpu_count(FakeNvml(count=2))
    assert count == 2
    check_gpus_exist(_servers_only({"gpus": [0, 1], "model_path": "m"}), count)
    with pytest.raises(ConfigError, match=r"servers.gpus: GPU 2, 7 does not exist \(this node has 2: 0..1\)"):
        check_gpus_exist(_servers_only({"gpus": [0, 2, 7], "model_path": "m"}), count)
    with pytest.raises(ConfigError, match="servers.count: GPU 2 does not exist"):
        check_gpus_exist(_servers_only({"count": 3, "model_path": "m"}), count)
    # No driver: nothing to check. The simulator uses no GPU at all.
    assert node_gpu_count(FakeNvml(init_error=9)) is None
    check_gpus_exist(_servers_only({"count": 9, "model_path": "m"}), None)
    sim = _servers_only({"count": 9, "model_path": "m",
                         "command": ["python", "-m", "supervisor.sim"]})
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


# -- settings SGLang 0.5.23 would turn against the whole job -----------------------------------

THINKING = {"servers": {"count": 2, "model_path": "/models/m"}}   # enable_thinking defaults on


@pytest.mark.parametrize("flags", [{}, {"reasoning-parser": False}, {"reasoning-parser": ""}])
def test_thinking_without_a_reasoning_parser_is_refused_naming_both_keys_and_the_fix(flags):
    with pytest.raises(ConfigError) as exc:
        parse_config({"servers": {**THINKING["servers"], "flags": flags}})
    text = str(exc.value)
    assert text.startswith("generation.enable_thinking = true needs servers.flags.reasoning-parser")
    assert "<think>" in text and "generation.enable_thinking = false" in text
    assert "\n" not in text


def test_thinking_with_a_parser_or_thinking_off_loads():
    on = parse_config({"servers": {**THINKING["servers"], "flags": {"reasoning-parser": "qwen3"}}})
    assert on.generation.enable_thinking and on.servers.flags["reasoning-parser"] == "qwen3"
    off = parse_config({**THINKING, "generation": {"enable_thinking": False}})
    assert not off.generation.enable_thinking


def test_a_retune_that_drops_the_parser_under_thinking_is_refused():
    cfg = parse_config({"servers": {**THINKING["servers"], "flags": {"reasoning-parser": "qwen3"}}})
    with pytest.raises(ConfigError, match="needs servers.flags.reasoning-parser"):
        with_flags(cfg, {"reasoning-parser": None})


@pytest.mark.parametrize("model", ["qwen3:latest", "org/model:v2", ":"])
def test_a_model_name_with_a_colon_is_refused_as_sglang_reads_it_as_a_lora_adapter(model):
    # sglang/srt/entrypoints/openai/serving_base.py, _parse_model_parameter: "base:adapter".
    with pytest.raises(ConfigError) as exc:
        parse_config({**BASE, "job": {"model": model}})
    assert str(exc.value).startswith(f"job.model: {model!r} contains ':'")
    assert "LoRA" in str(exc.value)


def test_a_colon_is_fine_when_it_is_the_served_model_name_itself():
    # SGLang keeps an exact served model name whole, colons and all.
    served = parse_config({**BASE, "job": {"model": "team:m"},
                           "servers": {**BASE["servers"], "flags": {"served-model-name": "team:m"}}})
    assert served.job.model == "team:m"
    # Without --served-model-name, SGLang serves under the model path.
    path = parse_config({**BASE, "job": {"model": "s3://b/m"},
                         "servers": {**BASE["servers"], "model_path": "s3://b/m"}})
    assert path.job.model == "s3://b/m"


@pytest.mark.parametrize("base_port, count, warned", [
    (30000, 8, False), (29999, 1, True), (29995, 8, True), (21993, 8, True), (21992, 8, False),
    (22000, 1, True), (8000, 2, False),
])
def test_server_ports_inside_sglangs_nccl_range_are_warned_not_refused(base_port, count, warned):
    cfg = parse_config({**BASE, "servers": {**BASE["servers"], "count": count,
                                            "base_port": base_port}})
    lines = load_warnings(cfg)
    assert bool(lines) == warned
    if warned:
        last = base_port + count - 1
        assert lines == [f"servers.base_port: the servers' ports {base_port}..{last} fall inside "
                         "22000..29999, where SGLang picks its NCCL ports; a server can find "
                         "its port taken by another's NCCL store (use base_port >= 30000, "
                         "e.g. 30000)"]


def test_the_port_warning_is_logged_at_load_and_printed_by_check(
        tmp_path: Path, caplog: pytest.LogCaptureFixture):
    path = tmp_path / "job.toml"
    path.write_text('[generation]\nenable_thinking = false\n'
                    '[servers]\ncount = 2\nmodel_path = "m"\nbase_port = 25000\n')
    with caplog.at_level("WARNING", logger="supervisor.config"):
        load_config(path)
    assert [r.getMessage() for r in caplog.records
            if r.name == "supervisor.config"] == [f"{path}: {load_warnings(load_config(path))[0]}"]
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')   # `check` wants it there
    out = cli(["check", "--config", str(path), "--skip-flag-check"])
    assert out.returncode == 0, out.stderr
    assert (f"WARNING: {path}: servers.base_port: the servers' ports 25000..25001 fall inside"
            in out.stderr)


def test_the_health_probe_waits_longer_than_sglangs_own_20_s_by_default():
    # SGLang 0.5.23's /health_generate waits up to 20 s for its scheduler to make progress
    # before answering 503 (sglang/srt/entrypoints/http_server.py:218 HEALTH_CHECK_TIMEOUT,
    # the loop at :779): a probe giving up sooner fails a loaded server SGLang calls healthy.
    cfg = parse_config(BASE)
    assert cfg.servers.health_timeout_s == 30.0 and load_warnings(cfg) == []
    short = parse_config({**BASE, "servers": {**BASE["servers"], "health_timeout_s": 10}})
    assert load_warnings(short) == [
        "servers.health_timeout_s: 10 s is not above SGLang's own 20 s wait in "
        "/health_generate; a loaded server that still makes progress can fail the probe "
        "(default 30)"]
    # The simulator answers at once: no warning for the demo's and the tests' short probes.
    sim = parse_config({**BASE, "servers": {**BASE["servers"], "health_timeout_s": 2,
                                            "command": ["python", "-m", "supervisor.sim"]}})
    assert load_warnings(sim) == []


def test_metrics_switched_off_are_warned_as_blind_detection():
    off = parse_config({**BASE, "servers": {**BASE["servers"],
                                            "flags": {**BASE["servers"].get("flags", {}),
                                                      "enable-metrics": False}}})
    assert load_warnings(off) == [
        "servers.flags.enable-metrics = false: SGLang's /metrics are off, so over-commit, "
        "saturation and waiting detection are blind"]
